<?php
// A worker written for the cli runtime, for the PHP-FPM fidelity tests
// (integration/fpm_fidelity_test.go): it uses the CLI's STDERR and Request::$headers.
declare(strict_types=1);

require __DIR__ . '/../../php/autoload.php';

use Peregrine\Http\Request;
use Peregrine\Http\Response;

fwrite(STDERR, "fidelity worker booted\n");

Peregrine\Worker::create()->serve(function (Request $r): Response {
    switch ($r->path) {
        case '/stderr':
            fwrite(STDERR, "fidelity: to stderr\n");

            return new Response(200, [], 'written');
        case '/header-from-input':
            // A raw-mode header named from input: "Set-Cookie: injected=1; X-D" must not become
            // a Set-Cookie header.
            return new Response(200, [(string) ($r->queryParams['name'] ?? '') => 'from input'], 'sent');
        case '/hint-from-input':
            Peregrine\Http\earlyHints([(string) ($r->queryParams['name'] ?? '') => '</a.css>; rel=preload']);

            return new Response(200, [], 'hinted');
        case '/headers':
            return new Response(200, ['Content-Type' => 'application/json'], json_encode($r->headers, JSON_THROW_ON_ERROR));
    }

    return new Response(404, [], 'no such route');
});
