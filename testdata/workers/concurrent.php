<?php
// A worker for workers.concurrency above 1: usleep() suspends only its request's fiber (on the
// native runtime, which hooks it; on the cli runtime it waits with Peregrine\Async\delay()), so
// one worker holds many sleeping requests at once.
//
//   /sleep?ms=N&tag=T   sleeps N ms (50 by default), answers T and its pid
//   /fatal?ms=N         sleeps N ms, then a fatal error (memory_limit) in its fiber
//   /session            session_start(), which a concurrent worker refuses: 500
//   /hints?tag=T&n=N    early hints Link </T-1.css>, waits until N requests have arrived at
//                       /hints, early hints Link </T-2.css>, answers T
//   /finally?ms=N       sleeps N ms in a try; its finally writes "finally ran" to STDERR
//   /upload             a multipart form: its fields and each file's name and size, as JSON
//   /count?out=F&ms=N   appends its pid to file F as it begins, sleeps N ms, answers "ok": a
//                       trace of every execution (a request PHP read never runs twice)
//   /barrier?n=N        waits, in usleep(1000) steps, until N requests have arrived (at most
//                       30 s): "met" proves N requests waited in this one process at once
declare(strict_types=1);

require __DIR__ . '/../../php/autoload.php';

use Peregrine\Http\Request;
use Peregrine\Http\Response;

// The cli runtime does not hook usleep(): it would hold every request of the worker.
$sleep = function_exists('peregrine_handle_request') ? static fn (int $us) => usleep($us) : static fn (int $us) => Peregrine\Async\delay($us / 1e6);
$arrived = 0;
$hinted = 0;
Peregrine\Worker::create()->serve(function (Request $r) use (&$arrived, &$hinted, $sleep): Response {
    $ms = (int) ($r->queryParams['ms'] ?? 50);
    if ($r->path === '/fatal') {
        $sleep($ms * 1000);
        ini_set('memory_limit', '32M');
        $hog = [];
        while (true) {
            $hog[] = str_repeat('x', 1 << 20);
        }
    }
    if ($r->path === '/count') {
        file_put_contents((string) $r->queryParams['out'], getmypid() . "\n", FILE_APPEND);
        $sleep($ms * 1000);
        return new Response(200, [], 'ok');
    }
    if ($r->path === '/session') {
        session_start();
        return new Response(200, [], 'a session, shared by every request in flight');
    }
    if ($r->path === '/hints') {
        $tag = (string) $r->queryParams['tag'];
        Peregrine\Http\earlyHints(['Link' => "</$tag-1.css>; rel=preload; as=style"]);
        $hinted++;
        $deadline = hrtime(true) + 30_000_000_000;
        while ($hinted < (int) $r->queryParams['n'] && hrtime(true) < $deadline) {
            $sleep(1000);
        }
        Peregrine\Http\earlyHints(['Link' => "</$tag-2.css>; rel=preload; as=style"]);
        return new Response(200, ['Content-Type' => 'text/plain'], $tag);
    }
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
            $sleep(1000);
        }
        return new Response(200, [], $arrived >= $n ? 'met' : 'timeout');
    }
    if ($r->path === '/finally') {
        try {
            $sleep($ms * 1000);
        } finally {
            fwrite(STDERR, "finally ran\n");
        }
    }
    $sleep($ms * 1000);
    return new Response(200, ['Content-Type' => 'text/plain'], ($r->queryParams['tag'] ?? '') . ' ' . getmypid());
});
