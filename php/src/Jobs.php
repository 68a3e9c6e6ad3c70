<?php

declare(strict_types=1);

namespace Peregrine;

use Peregrine\Internal\CallSocket;

/**
 * Jobs pushes background jobs to the pipelines of the server this worker runs under
 * (jobs.pipelines, docs/jobs.md). The push goes through the server, which stores the job in
 * the pipeline's broker before it answers: once push() returns, the job is stored.
 */
final class Jobs
{
    /**
     * Pushes a job and returns its id. The payload is anything json_encode() takes; the
     * consumer gets it back json_decode()d as an associative array (Job::$payload).
     *
     * @param int|float            $delay   seconds before the job may run
     * @param array<string,string> $headers passed to the consumer as Job::$headers
     *
     * @throws \RuntimeException for an unknown pipeline, a payload over 1 MiB encoded, or a broker
     *                           that cannot store the job; nothing is pushed then
     * @throws \JsonException    if the payload cannot be encoded
     */
    public static function push(string $pipeline, mixed $payload, int|float $delay = 0, array $headers = []): string
    {
        $request = [
            'op' => 'push',
            'pipeline' => $pipeline,
            'payload' => json_encode($payload, JSON_THROW_ON_ERROR | JSON_UNESCAPED_SLASHES | JSON_UNESCAPED_UNICODE | JSON_PRESERVE_ZERO_FRACTION),
        ];
        if ($delay > 0) {
            $request['delay'] = $delay;
        }
        if ($headers !== []) {
            $request['headers'] = array_map('strval', $headers);
        }

        return (string) CallSocket::call($request)['id'];
    }
}
