<?php
// PSR-7 mode with Nyholm's factory.
declare(strict_types=1);

require __DIR__ . '/../../php/autoload.php';
require '/usr/share/php/Nyholm/Psr7/autoload.php';

use Psr\Http\Message\ServerRequestInterface;
use Psr\Http\Message\ResponseInterface;

$factory = new Nyholm\Psr7\Factory\Psr17Factory();
Peregrine\Worker::create()->servePsr(function (ServerRequestInterface $r) use ($factory): ResponseInterface {
    $files = [];
    $uploaded = $r->getUploadedFiles();
    array_walk_recursive($uploaded, function ($f) use (&$files) {
        $files[] = ['name' => $f->getClientFilename(), 'size' => $f->getSize(), 'content' => (string) $f->getStream()];
    });
    $body = json_encode([
        'method' => $r->getMethod(), 'uri' => (string) $r->getUri(), 'query' => $r->getQueryParams(),
        'cookies' => $r->getCookieParams(), 'parsed' => $r->getParsedBody(), 'body' => (string) $r->getBody(),
        'host' => $r->getHeaderLine('host'), 'files' => $files, 'protocol' => $r->getProtocolVersion(),
    ], JSON_THROW_ON_ERROR);
    return $factory->createResponse(201)
        ->withHeader('Content-Type', 'application/json')
        ->withAddedHeader('Set-Cookie', 'x=1')->withAddedHeader('Set-Cookie', 'y=2')
        ->withBody($factory->createStream($body));
}, $factory);
