<?php
// The HTTP front's fixture (integration/http_front_test.go): says what PHP sees of the
// connection, and answers with as many bytes as ?size= asks for.
declare(strict_types=1);

require __DIR__ . '/../../php/autoload.php';

use Peregrine\Http\Request;
use Peregrine\Http\Response;

Peregrine\Worker::create()->serve(function (Request $r): Response {
    if (isset($r->queryParams['size'])) {
        return new Response(200, ['Content-Type' => 'text/plain'], str_repeat('x', (int) $r->queryParams['size']));
    }
    return new Response(200, ['Content-Type' => 'application/json'], json_encode([
        'remoteAddr' => $r->remoteAddr, 'remotePort' => $r->remotePort,
        'scheme' => $r->scheme, 'host' => $r->header('host'), 'protocol' => $r->protocol,
        'uri' => $r->uri, 'method' => $r->method, 'bodyLength' => strlen($r->body),
    ], JSON_THROW_ON_ERROR));
});
