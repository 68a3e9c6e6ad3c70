<?php
// HTTP worker of the jobs benchmark (issue 19): GET /push pushes one job with a 1 KiB payload
// through the server (Peregrine\Jobs::push) and answers its id; GET /noop builds the same
// payload and answers without pushing: the baseline of the push's added latency.
// The pipeline is BENCH_PIPELINE (default "bench").
declare(strict_types=1);

require __DIR__ . '/../../php/autoload.php';

use Peregrine\Http\Request;
use Peregrine\Http\Response;
use Peregrine\Jobs;

$pipeline = getenv('BENCH_PIPELINE') ?: 'bench';

Peregrine\Worker::create()->serve(static function (Request $request) use ($pipeline): Response {
    $payload = ['p' => str_repeat('x', 1016)]; // {"p":"xxx..."}: 1,024 bytes of JSON
    return match ($request->path) {
        '/push' => new Response(200, ['Content-Type' => 'text/plain'], Jobs::push($pipeline, $payload)),
        '/noop' => new Response(200, ['Content-Type' => 'text/plain'], (string) strlen($payload['p'])),
        default => new Response(404),
    };
});
