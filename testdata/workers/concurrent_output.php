<?php
// A concurrent worker whose requests use PHP's output buffers across a wait, as a template
// that queries a database does (docs/concurrency.md, "Isolation rules"), for
// integration/concurrency_headers_test.go.
//
//   /?tag=T&ms=N[&leave=removable|fixed]   answers "LEVEL <T>...</T>": the output level it
//                  started at, then what it echoed into a buffer of its own around a wait of N
//                  ms (usleep(): only this fiber waits); with leave, it also leaves a buffer
//                  open holding "left T" (fixed: one ob_start(null, 0, 0) opened, which PHP
//                  will not let it close)
declare(strict_types=1);

require __DIR__ . '/../../php/autoload.php';

use Peregrine\Http\Request;
use Peregrine\Http\Response;

Peregrine\Worker::create()->serve(static function (Request $r): Response {
    $tag = (string) ($r->queryParams['tag'] ?? '');
    $level = ob_get_level();
    ob_start();
    echo "<$tag>";
    usleep(1000 * (int) ($r->queryParams['ms'] ?? 10));
    echo "</$tag>";
    $page = (string) ob_get_clean();
    switch ($r->queryParams['leave'] ?? '') {
        case 'removable':
            ob_start();
            echo "left $tag\n";
            break;
        case 'fixed':
            ob_start(null, 0, 0);
            echo "left $tag\n";
            break;
    }

    return new Response(200, ['Content-Type' => 'text/plain'], "$level $page");
});
