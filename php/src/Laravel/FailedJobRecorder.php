<?php

declare(strict_types=1);

namespace Peregrine\Laravel;

use Illuminate\Contracts\Foundation\Application;
use Illuminate\Queue\Events\JobFailed;
use Peregrine\Internal\Handling;

/**
 * FailedJobRecorder records each job Laravel fails for good in the application's failed-job
 * store (queue.failed: the failed_jobs table), as `artisan queue:work` does
 * (WorkCommand::logFailedJob): Laravel's queue worker raises JobFailed and leaves the
 * recording to whoever runs it.
 *
 * @internal
 */
final class FailedJobRecorder
{
    /** Why the store could not record the last job that failed for good; null if it did (or none failed). */
    public ?string $unrecorded = null;

    public function __construct(private readonly Application $app)
    {
    }

    public function listen(): void
    {
        $this->app['events']->listen(JobFailed::class, function (JobFailed $event): void {
            try {
                $this->app['queue.failer']->log($event->connectionName, $event->job->getQueue(), $event->job->getRawBody(), $event->exception);
            } catch (\Throwable $e) {
                $this->unrecorded = Handling::describe($e);
            }
        });
    }
}
