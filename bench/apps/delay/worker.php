<?php
// A handler that waits 50 ms (a database or an API call), Peregrine raw mode.
declare(strict_types=1);

require __DIR__ . '/../../../php/autoload.php';

use Peregrine\Http\Request;
use Peregrine\Http\Response;

Peregrine\Worker::create()->serve(static function (Request $request): Response {
    usleep(50000);

    return new Response(200, ['Content-Type' => 'text/plain'], 'Hello, world!');
});
