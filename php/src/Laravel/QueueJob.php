<?php

declare(strict_types=1);

namespace Peregrine\Laravel;

use Illuminate\Container\Container;
use Illuminate\Contracts\Queue\Job as JobContract;
use Illuminate\Queue\Jobs\Job as BaseJob;
use Peregrine\Jobs\Job;

/**
 * QueueJob is a Peregrine job as Laravel's queue worker sees it: Laravel's payload, the attempt
 * Peregrine counts, and release() remembered for the consumer's answer.
 */
final class QueueJob extends BaseJob implements JobContract
{
    /** Seconds before the next attempt, when the job was released. */
    public int $releaseDelay = 0;

    public function __construct(Container $container, private readonly Job $job, string $connectionName)
    {
        $this->container = $container;
        $this->connectionName = $connectionName;
        $this->queue = $job->pipeline;
    }

    public function getJobId(): string
    {
        return $this->job->id;
    }

    public function getRawBody(): string
    {
        return json_encode($this->job->payload, JSON_THROW_ON_ERROR | JSON_UNESCAPED_SLASHES | JSON_UNESCAPED_UNICODE | JSON_PRESERVE_ZERO_FRACTION);
    }

    public function attempts(): int
    {
        return $this->job->attempt;
    }

    public function release($delay = 0): void
    {
        parent::release($delay);
        $this->releaseDelay = max(0, (int) $delay);
    }
}
