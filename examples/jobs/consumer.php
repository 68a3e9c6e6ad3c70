<?php
// Consumer of the jobs benchmark (issue 19): takes each job and does nothing with it, so the
// benchmark measures the queue (push, store, deliver, acknowledge), not the work.
declare(strict_types=1);

require __DIR__ . '/../../php/autoload.php';

Peregrine\Worker::create()->consume(static function (Peregrine\Jobs\Job $job): void {
});
