<?php

declare(strict_types=1);

namespace Peregrine\Jobs;

/**
 * Job is one job handed to a consumer (Peregrine\Worker::consume()). A consumer that returns
 * acknowledges it; one that throws fails this attempt, which is retried after the pipeline's
 * backoff or, after its last attempt, moved to the dead letters.
 */
final class Job
{
    /**
     * @param mixed                 $payload what was pushed, json_decode()d (objects as arrays)
     * @param array<string, string> $headers the headers given to push()
     * @param int                   $attempt 1 on the first run, 2 on the first retry...
     */
    public function __construct(
        public readonly string $id,
        public readonly string $pipeline,
        public readonly mixed $payload,
        public readonly array $headers = [],
        public readonly int $attempt = 1,
    ) {
    }
}
