<?php

declare(strict_types=1);

namespace Peregrine\Internal;

use Peregrine\Http\Request;
use Peregrine\Http\Response;
use Peregrine\Jobs\Job;

/**
 * JobConsumer turns a consumer callable into the request handler Worker::consume() serves with:
 * the server sends each job as a JOB request (docs/protocol.md: path /PIPELINE, the id, attempt
 * and headers in x-peregrine-job-* headers, the JSON payload as body) and reads the answer's
 * status: 200 acknowledges the job, 500 fails the attempt with the exception's description as
 * body. A request that is not a job is answered 400 and never reaches the callable.
 *
 * @internal
 */
final class JobConsumer
{
    /**
     * @param callable(Job): mixed $consumer
     *
     * @return \Closure(Request): Response
     */
    public static function handler(callable $consumer): \Closure
    {
        return static function (Request $request) use ($consumer): Response {
            if ($request->method !== 'JOB') {
                return new Response(400, ['Content-Type' => 'text/plain'], 'A consumer takes jobs, not ' . $request->method . ' requests');
            }
            try {
                $job = self::job($request);
                $consumer($job);
            } catch (\Throwable $e) {
                $message = Handling::describe($e);
                file_put_contents('php://stderr', 'Job ' . ($job->id ?? '?') . ' attempt ' . ($job->attempt ?? '?') . ' failed: '
                    . strtr($message, ["\n" => ' ', "\r" => ' ']) . "\n");

                return new Response(500, ['Content-Type' => 'text/plain'], $message);
            }

            return new Response(200);
        };
    }

    /** @throws \JsonException if the payload or the headers are not JSON */
    public static function job(Request $request): Job
    {
        $headers = $request->header('x-peregrine-job-headers');

        return new Job(
            id: (string) $request->header('x-peregrine-job-id'),
            pipeline: (string) $request->header('x-peregrine-job-pipeline'),
            payload: $request->body === '' ? null : json_decode($request->body, true, 512, JSON_THROW_ON_ERROR),
            headers: $headers === null || $headers === '' ? [] : array_map('strval', (array) json_decode($headers, true, 16, JSON_THROW_ON_ERROR)),
            attempt: (int) ($request->header('x-peregrine-job-attempt') ?? 1),
        );
    }
}
