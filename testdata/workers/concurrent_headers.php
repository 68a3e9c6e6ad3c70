<?php
// A concurrent worker whose requests use PHP's own header(), setcookie() and
// http_response_code() (docs/concurrency.md, "Isolation rules"), for
// integration/concurrency_headers_test.go.
//
//   /?tag=T&ms=N   sets X-Tag: T and the cookie tag=T, sleeps N ms (usleep(): only this fiber
//                  waits), sets X-After: T, and answers T with a Response whose own
//                  X-Replaced header replaces the one header() set
declare(strict_types=1);

require __DIR__ . '/../../php/autoload.php';

use Peregrine\Http\Request;
use Peregrine\Http\Response;

Peregrine\Worker::create()->serve(static function (Request $r): Response {
    $tag = (string) ($r->queryParams['tag'] ?? '');
    header("X-Tag: $tag");
    header('X-Replaced: by header()');
    setcookie('tag', $tag);
    usleep(1000 * (int) ($r->queryParams['ms'] ?? 10));
    header("X-After: $tag");

    return new Response(200, ['Content-Type' => 'text/plain', 'X-Replaced' => 'by the Response'], $tag);
});
