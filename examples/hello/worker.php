<?php
// The smallest Peregrine app: `peregrine serve examples/hello/worker.php`.
declare(strict_types=1);

require __DIR__ . '/../../php/autoload.php';

use Peregrine\Http\Request;
use Peregrine\Http\Response;

// Everything above serve() runs once per worker process, not once per request.
$served = 0;

Peregrine\Worker::create()->serve(function (Request $request) use (&$served): Response {
    ++$served;

    return new Response(200, ['Content-Type' => 'text/plain', 'X-Served' => (string) $served], 'Hello, world!');
});
