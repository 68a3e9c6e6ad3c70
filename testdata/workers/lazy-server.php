<?php
// A raw worker that never names the server superglobal: under the native runtime PHP registers
// it only for code that reads it (auto_globals_jit), which the Peregrine\Worker library must not
// defeat. /throw fails once (the library's error path loads then).
declare(strict_types=1);

require __DIR__ . '/../../php/autoload.php';

use Peregrine\Http\Request;
use Peregrine\Http\Response;

Peregrine\Worker::create()->serve(function (Request $r): Response {
    if ($r->path === '/throw') {
        throw new RuntimeException('on purpose');
    }
    return new Response(200, [], array_key_exists('_SERVER', $GLOBALS) ? 'registered' : 'lazy');
});
