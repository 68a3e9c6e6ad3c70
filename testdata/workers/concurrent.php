<?php
// A worker for workers.concurrency above 1 (native runtime): usleep() suspends only its
// request's fiber, so one worker holds many sleeping requests at once.
//
//   /sleep?ms=N&tag=T   sleeps N ms (50 by default), answers T and its pid
//   /finally?ms=N       sleeps N ms in a try; its finally writes "finally ran" to STDERR
//   /upload             a multipart form: its fields and each file's name and size, as JSON
//   /barrier?n=N        waits, in usleep(1000) steps, until N requests have arrived (at most
//                       30 s): "met" proves N requests waited in this one process at once
declare(strict_types=1);

require __DIR__ . '/../../php/autoload.php';

use Peregrine\Http\Request;
use Peregrine\Http\Response;

$arrived = 0;
Peregrine\Worker::create()->serve(function (Request $r) use (&$arrived): Response {
    if ($r->path === '/upload') {
        $files = [];
        foreach ($r->files as $field => $f) {
            $files[$field] = [$f->name, $f->size, $f->tmpPath !== '' ? strlen((string) file_get_contents($f->tmpPath)) : -1];
        }
        return new Response(200, ['Content-Type' => 'application/json'], json_encode(['fields' => $r->parsedBody, 'files' => $files]));
    }
    if ($r->path === '/barrier') {
        $n = (int) $r->queryParams['n'];
        $arrived++;
        $deadline = hrtime(true) + 30_000_000_000;
        while ($arrived < $n && hrtime(true) < $deadline) {
            usleep(1000);
        }
        return new Response(200, [], $arrived >= $n ? 'met' : 'timeout');
    }
    $ms = (int) ($r->queryParams['ms'] ?? 50);
    if ($r->path === '/finally') {
        try {
            usleep($ms * 1000);
        } finally {
            fwrite(STDERR, "finally ran\n");
        }
    }
    usleep($ms * 1000);
    return new Response(200, ['Content-Type' => 'text/plain'], ($r->queryParams['tag'] ?? '') . ' ' . getmypid());
});
