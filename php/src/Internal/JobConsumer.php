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
 * status: 200 with `x-peregrine-job: done` acknowledges the job, 500 fails the attempt with the
 * exception's description as body. The header says the callable returned: a script that
 * exit()s or die()s mid-job ends the request with whatever answer PHP makes of it (the native
 * runtime: a 200, as under PHP-FPM), and the server fails that attempt. A fatal error's 500
 * carries its message, which the server keeps as the job's error: in the body (the cli
 * runtime, whose worker would answer an empty 500) or in `x-peregrine-job-error` (the native
 * runtime, which discards the output after a fatal error). A request that is not a job is
 * answered 400 and never reaches the callable.
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
        $native = \function_exists('peregrine_handle_request');
        if (!$native) {
            // Registered before the Worker's loop registers its own, so it runs first.
            register_shutdown_function(self::answerFatal(...));
        }

        return static function (Request $request) use ($consumer, $native): Response {
            if ($request->method !== 'JOB') {
                return new Response(400, ['Content-Type' => 'text/plain'], 'A consumer takes jobs, not ' . $request->method . ' requests');
            }
            if ($native) { // run by the native runtime after a fatal error in this request
                register_shutdown_function(static function (): void {
                    if (($fatal = self::fatal()) !== null) {
                        header(self::ERROR_HEADER . ': ' . $fatal);
                    }
                });
            }
            self::$running = true;
            try {
                $job = self::job($request);
                $consumer($job);
            } catch (\Throwable $e) {
                $message = Handling::describe($e);
                file_put_contents('php://stderr', 'Job ' . ($job->id ?? '?') . ' attempt ' . ($job->attempt ?? '?') . ' failed: '
                    . strtr($message, ["\n" => ' ', "\r" => ' ']) . "\n");

                return new Response(500, ['Content-Type' => 'text/plain'], $message);
            } finally {
                self::$running = false;
            }

            return new Response(200, [self::DONE_HEADER => 'done']);
        };
    }

    /** The header of an answer to a job that a fatal error ended: its message. */
    public const ERROR_HEADER = 'x-peregrine-job-error';

    /** Whether a job's callable is running (a fatal error now ends that job). */
    private static bool $running = false;

    /** The message of the fatal error that ended a job's callable, on one line; null if none did. */
    private static function fatal(): ?string
    {
        $error = error_get_last();
        if (!self::$running || !Handling::isFatal($error)) {
            return null;
        }

        return substr(strtr("PHP Fatal error: {$error['message']} in {$error['file']}:{$error['line']}", ["\r" => ' ', "\n" => ' ']), 0, 1024);
    }

    /**
     * Under the cli runtime, answers the job a fatal error ended with a 500 that says why, in
     * place of the empty one the Worker's own shutdown would send (it sends nothing once
     * CurrentRequest has no request).
     */
    private static function answerFatal(): void
    {
        $id = CurrentRequest::$id;
        if (($fatal = self::fatal()) === null || $id === 0 || CurrentRequest::$connection === null) {
            return;
        }
        try {
            CurrentRequest::$connection->send(Frame::response($id, 500, [], $fatal) . Frame::done($id, true));
            CurrentRequest::$id = 0;
        } catch (ProtocolError) {
            // The server is gone; the Worker's shutdown finds the same.
        }
    }

    /** The header of an answer that acknowledges a job: the consumer returned from it. */
    public const DONE_HEADER = 'x-peregrine-job';

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
