<?php
// A worker on Peregrine\Internal\NativeServer; NATIVE_MODE picks serve, psr or globals.
declare(strict_types=1);

require __DIR__ . '/../../../php/autoload.php';

use Peregrine\Http\Request;
use Peregrine\Http\Response;
use Peregrine\Http\UploadedFile;
use Peregrine\Internal\NativeServer;

$server = new NativeServer();
$resets = 0;
$server->onReset(function () use (&$resets): void {
    $resets++;
});

switch (getenv('NATIVE_MODE')) {
    case 'serve':
        $server->serve(function (Request $r) use (&$resets): Response {
            if ($r->path === '/headers') {
                return new Response(200, [], json_encode($r->headers, JSON_THROW_ON_ERROR));
            }
            if ($r->path === '/throw') {
                echo 'stray output';
                throw new RuntimeException('handler failed');
            }
            $files = [];
            foreach ($r->files as $field => $f) {
                $files[$field] = $f instanceof UploadedFile ? [$f->name, $f->size, $f->error, is_uploaded_file($f->tmpPath)] : 'nested';
            }
            echo 'goes to the log';

            return new Response(201, ['Content-Type' => 'application/json', 'Set-Cookie' => ['a=1', 'b=2'], 'Location' => '/kept-201'],
                json_encode(['method' => $r->method, 'uri' => $r->uri, 'query' => $r->queryParams, 'host' => $r->header('Host'),
                    'cookies' => $r->cookies, 'body' => $r->body, 'parsed' => $r->parsedBody, 'files' => $files,
                    'remote' => [$r->remoteAddr, $r->remotePort], 'scheme' => $r->scheme, 'protocol' => $r->protocol,
                    'resets' => $resets, 'headers' => array_keys($r->headers)], JSON_THROW_ON_ERROR));
        });
        break;
    case 'psr':
        require '/usr/share/php/Nyholm/Psr7/autoload.php';
        $factory = new Nyholm\Psr7\Factory\Psr17Factory();
        $server->servePsr(function (Psr\Http\Message\ServerRequestInterface $r) use ($factory, &$resets): Psr\Http\Message\ResponseInterface {
            if ($r->getUri()->getPath() === '/unchecked-header') {
                // A PSR-7 implementation that does not check its header names, as Nyholm does.
                $response = $factory->createResponse(200);
                (new ReflectionProperty($response, 'headers'))->setValue($response, ['Set-Cookie: injected=1; X-D' => ['v']]);

                return $response;
            }
            if ($r->getUri()->getPath() === '/headers') {
                return $factory->createResponse(200)->withBody($factory->createStream(json_encode($r->getHeaders(), JSON_THROW_ON_ERROR)));
            }
            return $factory->createResponse(202)->withHeader('Content-Type', 'application/json')
                ->withBody($factory->createStream(json_encode(['method' => $r->getMethod(), 'uri' => (string) $r->getUri(),
                    'query' => $r->getQueryParams(), 'parsed' => $r->getParsedBody(), 'body' => (string) $r->getBody(),
                    'files' => array_map(static fn ($f) => [$f->getClientFilename(), $f->getSize()], $r->getUploadedFiles()),
                    'cookies' => $r->getCookieParams(), 'version' => $r->getProtocolVersion(), 'resets' => $resets,
                    'headers' => array_keys($r->getHeaders())], JSON_THROW_ON_ERROR)));
        }, $factory);
        break;
    case 'globals':
        $server->serveGlobals(function (): void {
            // Not the server superglobal: this file must not name it, or every mode would have
            // it registered for every request (native/worker.c); the cases name it themselves.
            require getenv('SCRIPT_FILENAME');
        });
        break;
}
