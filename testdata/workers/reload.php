<?php
// A worker whose answers show what a reload changed (integration/reload_test.go): its pid, the
// RELOAD_TAG of workers.env and the concurrency it runs with, after ms milliseconds of usleep()
// (which suspends only its fiber under workers.concurrency > 1). /upload answers the files of a
// multipart body, whoever parsed it (PHP itself at concurrency 1, the server above).
declare(strict_types=1);

require __DIR__ . '/../../php/autoload.php';

use Peregrine\Http\Request;
use Peregrine\Http\Response;

Peregrine\Worker::create()->serve(function (Request $r): Response {
    if ($r->path === '/upload') {
        $files = [];
        foreach ($r->files as $field => $f) {
            $files[$field] = [$f->name, $f->size];
        }
        return new Response(200, [], json_encode(['fields' => $r->parsedBody, 'files' => $files]));
    }
    $ms = (int) ($r->queryParams['ms'] ?? 0);
    if ($ms >= 1000) {
        fwrite(STDERR, "a slow request started\n");
    }
    usleep($ms * 1000);
    return new Response(200, [], json_encode([
        'pid' => getmypid(),
        'tag' => getenv('RELOAD_TAG'),
        'concurrency' => (int) (getenv('PEREGRINE_CONCURRENCY') ?: 1),
    ]));
});
