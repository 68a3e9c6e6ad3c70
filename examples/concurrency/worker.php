<?php
// Peregrine worker of the concurrency benchmark (issue 17): the waits of waits.php, one a path.
// Run with `workers.concurrency` > 1: every request runs in a fiber of its own and each wait
// suspends only it. Connections are pooled per worker, one request per connection at a time.
declare(strict_types=1);

require __DIR__ . '/../../php/autoload.php';
require __DIR__ . '/waits.php';

use Peregrine\Http\Request;
use Peregrine\Http\Response;

[$mysql, $redis] = concurrency_pools();

Peregrine\Worker::create()->serve(static function (Request $request) use ($mysql, $redis): Response {
    $body = concurrency_wait($request->path, $mysql, $redis);
    if ($body === null) {
        return new Response(404, ['Content-Type' => 'text/plain'], 'no such wait');
    }
    return new Response(200, ['Content-Type' => 'text/plain'], $body);
});
