<?php
// Hello world, Peregrine raw mode: Peregrine\Http\Request in, Peregrine\Http\Response out.
declare(strict_types=1);

require __DIR__ . '/../../../php/autoload.php';

use Peregrine\Http\Request;
use Peregrine\Http\Response;

Peregrine\Worker::create()->serve(static function (Request $request): Response {
    return new Response(200, ['Content-Type' => 'text/plain'], 'Hello, world!');
});
