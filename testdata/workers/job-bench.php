<?php
// A consumer that does nothing with its jobs: the jobs throughput benchmark measures the queue.
declare(strict_types=1);

require __DIR__ . '/../../php/autoload.php';

Peregrine\Worker::create()->consume(static function (Peregrine\Jobs\Job $job): void {
});
