<?php

declare(strict_types=1);

namespace Peregrine\Laravel;

use Illuminate\Contracts\Foundation\Application;
use Illuminate\Queue\WorkerOptions;
use Peregrine\Http\Request;
use Peregrine\Http\Response;
use Peregrine\Internal\Handling;
use Peregrine\Internal\JobConsumer;
use Peregrine\Worker;

/**
 * Consumer runs the jobs of a Laravel application's `peregrine` queue connection on a Peregrine
 * consumer (php/bin/laravel-consumer.php, which `serve --laravel` starts for jobs.pipelines):
 * the application boots once, each job goes through Laravel's queue worker (events, tries,
 * backoff, failed_jobs, as `artisan queue:work` does), and the Sandbox puts the application
 * back after each job, as after each request.
 *
 * What Laravel decides becomes the answer: a job that finished, or that Laravel failed for good
 * (recorded in its failed-job store, failed_jobs, as queue:work records it), is acknowledged; a
 * job failed for good that the store could not record fails this attempt (500), so that it is
 * not lost; a released job (an exception with tries left, or
 * release($delay)) fails this attempt with x-peregrine-job-retry-after: its delay.
 */
final class Consumer
{
    private function __construct(
        private readonly Application $app,
        private readonly Sandbox $sandbox,
        private readonly FailedJobRecorder $failures,
    ) {
    }

    public static function boot(string $appDir): self
    {
        $app = Server::boot($appDir)->application();
        $keep = $app['config']->get('peregrine.keep', []);
        $failures = new FailedJobRecorder($app);
        // Before the capture, so that the sandbox's restore after each job keeps the listener.
        $failures->listen();

        return new self($app, Sandbox::capture($app, \is_array($keep) ? array_values($keep) : []), $failures);
    }

    public function run(): void
    {
        $connection = 'peregrine';
        foreach ((array) $this->app['config']->get('queue.connections', []) as $name => $c) {
            if (\is_array($c) && ($c['driver'] ?? '') === 'peregrine') {
                $connection = (string) $name;
                break;
            }
        }
        $tries = (int) $this->app['config']->get("queue.connections.{$connection}.tries", 1);
        Worker::create()->onReset($this->sandbox->restore(...))->serve(function (Request $request) use ($connection, $tries): Response {
            if ($request->method !== 'JOB') {
                return new Response(400, [], 'A consumer takes jobs');
            }
            $job = new QueueJob($this->app, JobConsumer::job($request), $connection);
            $this->failures->unrecorded = null;
            $options = new WorkerOptions('default', 0, 128, 60, 3, $tries);
            try {
                $this->app['queue.worker']->process($connection, $job, $options);
            } catch (\Throwable $e) {
                file_put_contents('php://stderr', 'Laravel job ' . $job->getJobId() . ' attempt ' . $job->attempts() . ' failed: '
                    . strtr(Handling::describe($e), ["\n" => ' ']) . "\n");
            }
            if (($unrecorded = $this->failures->unrecorded) !== null) { // not lost: the pipeline retries it, then dead-letters it
                file_put_contents('php://stderr', 'Laravel job ' . $job->getJobId() . ' failed for good but the failed-job store could not record it: '
                    . strtr($unrecorded, ["\n" => ' ']) . "\n");

                return new Response(500, [], 'failed for good, and the failed-job store could not record it: ' . $unrecorded);
            }
            if ($job->isReleased() && !$job->isDeleted() && !$job->hasFailed()) {
                return new Response(500, ['x-peregrine-job-retry-after' => (string) $job->releaseDelay], 'released by Laravel');
            }

            return new Response(200, [JobConsumer::DONE_HEADER => 'done']);
        });
    }
}
