<?php
// A worker on Peregrine\Internal\NativeServer; NATIVE_MODE picks serve, psr or globals.
declare(strict_types=1);

require __DIR__ . '/../../../php/autoload.php';

use Peregrine\Http\Request;
use Peregrine\Http\Response;
use Peregrine\Http\UploadedFile;
use Peregrine\Internal\NativeServer;

/**
 * Whether $r, built by peregrine_request_object(), is the Request that Request::fromFrame()
 * builds from peregrine_request() (as NativeServer built it before): the same properties
 * initialised, the same values once read, the same errors when code outside the class writes or
 * unsets them. "same", or both states.
 */
function compareRequests(Request $r): string
{
    [$fields, $headers] = \peregrine_request();
    $length = $fields[12];
    $hasBody = $length !== '0' && ($length !== '' || ($fields[0] !== 'GET' && $fields[0] !== 'HEAD'));
    $old = Request::fromFrame($fields, $headers, $hasBody ? (string) file_get_contents('php://input') : '', []);
    $states = [requestState($r), requestState($old)];

    return $states[0] === $states[1] ? 'same' : var_export($states, true);
}

/** @return array<string, mixed> */
function requestState(Request $r): array
{
    $state = ['class' => $r::class];
    $props = array_filter((new ReflectionClass($r))->getProperties(), static fn (ReflectionProperty $p): bool => !$p->isStatic());
    foreach ($props as $p) {
        $state['initialized'][$p->getName()] = $p->isInitialized($r);
    }
    // Writes and unsets from outside the class, before and after the lazy properties are read.
    foreach ([0, 1] as $round) {
        foreach ($props as $p) {
            $name = $p->getName();
            foreach (['write' => static function () use ($r, $name): void {
                $r->{$name} = null;
            }, 'append' => static function () use ($r, $name): void {
                $r->{$name}[] = 'x';
            }, 'unset' => static function () use ($r, $name): void {
                unset($r->{$name});
            }] as $what => $change) {
                try {
                    $change();
                    $state['changes'][$round][$name][$what] = 'allowed';
                } catch (Error $e) {
                    $state['changes'][$round][$name][$what] = $e::class . ': ' . $e->getMessage();
                }
            }
            if ($p->isPublic()) {
                $state['value'][$name] = $r->{$name};
            }
        }
    }
    foreach ($props as $p) {
        $state['value'][$p->getName()] = $p->getValue($r);
    }
    $state['after'] = serialize($r);

    return $state;
}

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
            if ($r->path === '/memory') {
                return new Response(200, [], (string) memory_get_usage());
            }
            if ($r->path === '/answer') {
                // Read every lazy property, answer with repeated headers and no Content-Type.
                return new Response(200, ['X-N' => ['1', '2'], 'Set-Cookie' => 'a=1'],
                    serialize([$r->queryParams, $r->cookies, $r->parsedBody, $r->files, $r->body]));
            }
            if ($r->path === '/compare') {
                $verdict = compareRequests($r);

                return new Response(200, ['X-Compare' => $verdict === 'same' ? 'same' : 'differ'], $verdict); // a HEAD has no body
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
