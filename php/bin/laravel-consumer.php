<?php
// The job consumer `peregrine serve --laravel APP_DIR` runs for jobs.pipelines on the native
// runtime: it boots the Laravel application in APP_DIR once and runs each job of its `peregrine`
// queue connection through Laravel's queue worker, in the same sandbox as requests
// (php/src/Laravel/Consumer.php, docs/jobs.md).
declare(strict_types=1);

require __DIR__ . '/../autoload.php';

$dir = $argv[1] ?? getenv('PEREGRINE_APP_DIR') ?: getcwd();
Peregrine\Laravel\Consumer::boot((string) realpath((string) $dir) ?: (string) $dir)->run();
