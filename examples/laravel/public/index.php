<?php
// The Laravel 8 skeleton's front controller: what nginx + PHP-FPM (or `peregrine serve --root
// public`) runs for every request. `peregrine serve --laravel .` does not use it: its worker
// boots bootstrap/app.php once and hands each request to the same kernel.
declare(strict_types=1);

use Illuminate\Contracts\Http\Kernel;
use Illuminate\Http\Request;

define('LARAVEL_START', microtime(true));

$app = require __DIR__ . '/../bootstrap/app.php';

$kernel = $app->make(Kernel::class);

$response = $kernel->handle(
    $request = Request::capture()
)->send();

$kernel->terminate($request, $response);
