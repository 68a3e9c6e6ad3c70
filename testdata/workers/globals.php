<?php
// FPM-style code: superglobals, echo, http_response_code() and Peregrine\Http\header().
declare(strict_types=1);

require __DIR__ . '/../../php/autoload.php';

Peregrine\Worker::create()->serveGlobals(function (): void {
    if (($_GET['missing'] ?? '') === '1') {
        http_response_code(404);
        Peregrine\Http\header('X-Reason: not here');
        echo 'not found';
        return;
    }
    Peregrine\Http\header('Content-Type: application/json');
    echo json_encode([
        'get' => $_GET, 'post' => $_POST, 'cookie' => $_COOKIE, 'request' => $_REQUEST,
        'files' => $_FILES === [] ? new stdClass() : array_map(fn ($f) => ['name' => $f['name'], 'size' => $f['size']], $_FILES),
        'method' => $_SERVER['REQUEST_METHOD'], 'uri' => $_SERVER['REQUEST_URI'], 'qs' => $_SERVER['QUERY_STRING'],
        'host' => $_SERVER['HTTP_HOST'] ?? null, 'remote' => $_SERVER['REMOTE_ADDR'],
        'protocol' => $_SERVER['SERVER_PROTOCOL'], 'input' => Peregrine\Http\input(),
    ], JSON_THROW_ON_ERROR);
});
