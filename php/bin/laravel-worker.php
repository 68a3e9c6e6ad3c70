<?php
// The worker `peregrine serve --laravel APP_DIR` runs on the native runtime: it boots the Laravel
// application in APP_DIR once (its bootstrap/app.php) and serves every request in a sandbox
// (php/src/Laravel, docs/frameworks.md).
declare(strict_types=1);

require __DIR__ . '/../autoload.php';

$dir = $argv[1] ?? getenv('PEREGRINE_APP_DIR') ?: getcwd();
Peregrine\Laravel\Server::boot((string) realpath((string) $dir) ?: (string) $dir)->serve();
