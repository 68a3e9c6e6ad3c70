<?php

declare(strict_types=1);

namespace Peregrine\Laravel;

use Illuminate\Contracts\Queue\Queue as QueueContract;
use Illuminate\Queue\Queue as BaseQueue;
use Peregrine\Jobs;

/**
 * Queue is the `peregrine` queue connection (docs/jobs.md, "For Laravel queue users"): dispatch()
 * pushes Laravel's job payload to a Peregrine pipeline with Peregrine\Jobs::push(), and the
 * pipeline's consumers (php/bin/laravel-consumer.php) run it through Laravel's queue worker.
 * The queue name is the pipeline's name; the connection's `queue` is the default one.
 *
 * Jobs are taken by Peregrine's consumers, not by `artisan queue:work`: pop() returns nothing,
 * and size() is not known to PHP (see `peregrine jobs`).
 */
final class Queue extends BaseQueue implements QueueContract
{
    public function __construct(private readonly string $default = 'default')
    {
    }

    public function size($queue = null): int
    {
        return 0;
    }

    public function push($job, $data = '', $queue = null): string
    {
        return $this->pushRaw($this->createPayload($job, $this->getQueue($queue), $data), $queue);
    }

    /** @param array<string, mixed> $options delay: seconds */
    public function pushRaw($payload, $queue = null, array $options = []): string
    {
        return Jobs::push($this->getQueue($queue), json_decode((string) $payload, true, 512, JSON_THROW_ON_ERROR),
            delay: max(0, (int) ($options['delay'] ?? 0)), headers: ['laravel-connection' => (string) $this->getConnectionName()]);
    }

    public function later($delay, $job, $data = '', $queue = null): string
    {
        return $this->pushRaw($this->createPayload($job, $this->getQueue($queue), $data), $queue,
            ['delay' => $this->secondsUntil($delay)]);
    }

    public function pop($queue = null)
    {
        return null;
    }

    public function getQueue(?string $queue): string
    {
        return $queue !== null && $queue !== '' ? $queue : $this->default;
    }
}
