<?php
// The integration tests' main worker: one route per behaviour under test.
declare(strict_types=1);

require __DIR__ . '/../../php/autoload.php';

use Peregrine\Http\Request;
use Peregrine\Http\Response;

$leak = [];
$served = 0;
$after = null; // what to do once the answer is sent

Peregrine\Worker::create()->onReset(function () use (&$after): void {
    if ($after !== null) {
        [$do, $after] = [$after, null];
        $do();
    }
})->serve(function (Request $r) use (&$leak, &$served, &$after): Response {
    $served++;
    switch ($r->path) {
        case '/forge':
            // Breaks the protocol: after its answer, a RESPONSE for the request the server will
            // send next (ids count up from 1 per worker), as if to answer it in advance.
            // pad lengthens the forged body; delay (ms) holds it back, so that it is still in the
            // pipe, not read ahead with the answer, when the server looks next.
            $pad = (int) ($r->queryParams['pad'] ?? 0);
            $delay = (int) ($r->queryParams['delay'] ?? 0);
            $after = function () use (&$served, $pad, $delay): void {
                usleep($delay * 1000);
                $fd = fopen('php://fd/4', 'wb');
                $head = "X-Forged\0yes";
                $body = 'forged answer' . str_repeat('p', $pad);
                fwrite($fd, pack('CCvVVvV', 3, 3, 0, $served + 1, 6 + strlen($head) + strlen($body), 200, strlen($head)) . $head . $body);
                fflush($fd);
            };
            return new Response(200, [], 'honest answer');
        case '/spawn-crash':
            // A child that inherits the protocol pipes outlives the worker, which then dies.
            exec(($r->queryParams['setsid'] ?? '') !== '' ? 'setsid sleep 5 > /dev/null 2>&1 &' : 'sleep 5 > /dev/null 2>&1 &');
            exit(3);
        case '/spawn':
            exec('sleep 5 > /dev/null 2>&1 &');
            return new Response(200, [], 'spawned');
        case '/many-headers':
            $n = (int) ($r->queryParams['n'] ?? 10);
            return new Response(200, ['X-Many' => array_map('strval', range(1, $n))], "$n headers");
        case '/huge-frame':
            // A frame header announcing more than the server takes, then the worker waits.
            $fd = fopen('php://fd/4', 'wb');
            fwrite($fd, pack('CCvVV', 2, 3, 0, $served, 64 << 20));
            fflush($fd);
            sleep(30);
            return new Response(200, [], 'unreachable');
        case '/echo-size':
            // Answers with as many bytes as it was sent, before looking at its body.
            return new Response(200, [], str_repeat('z', (int) ($r->queryParams['size'] ?? strlen($r->body))));
        case '/echo':
            $files = [];
            $walk = function (array $tree) use (&$walk, &$files): void {
                foreach ($tree as $f) {
                    if (is_array($f)) {
                        $walk($f);
                        continue;
                    }
                    $files[] = [
                        'name' => $f->name, 'type' => $f->type, 'size' => $f->size, 'error' => $f->error,
                        'sha1' => $f->tmpPath !== '' ? sha1_file($f->tmpPath) : null, 'tmpPath' => $f->tmpPath,
                    ];
                }
            };
            $walk($r->files);
            return new Response(200, ['Content-Type' => 'application/json'], json_encode([
                'method' => $r->method, 'uri' => $r->uri, 'path' => $r->path, 'query' => $r->query,
                'queryParams' => $r->queryParams, 'headers' => $r->headers, 'cookies' => $r->cookies,
                'parsedBody' => $r->parsedBody, 'files' => $files, 'fileKeys' => array_keys($r->files),
                'bodyLength' => strlen($r->body), 'bodySha1' => sha1($r->body),
                'bodyHex' => strlen($r->body) <= 1024 ? bin2hex($r->body) : null,
                'remoteAddr' => $r->remoteAddr, 'protocol' => $r->protocol,
                'userAgent' => $r->header('USER-AGENT'),
            ], JSON_THROW_ON_ERROR));
        case '/pid':
            return new Response(200, ['Content-Type' => 'text/plain'], (string) getmypid());
        case '/document-root':
            // Whether $_SERVER has DOCUMENT_ROOT, and what (direct and proxied modes compared).
            return new Response(200, ['Content-Type' => 'application/json'], json_encode([
                'set' => array_key_exists('DOCUMENT_ROOT', $_SERVER), 'value' => $_SERVER['DOCUMENT_ROOT'] ?? null,
            ], JSON_THROW_ON_ERROR));
        case '/served':
            return new Response(200, [], getmypid() . ' ' . $served);
        case '/crash':
            exit(3);
        case '/fatal':
            // Exhausting memory_limit is a fatal error no handler can catch: the process dies.
            ini_set('memory_limit', '32M');
            $s = str_repeat('x', 64 << 20);
            return new Response(200, [], 'unreachable');
        case '/undefined':
            undefined_function_for_an_error();
        case '/throw':
            throw new RuntimeException('thrown on purpose');
        case '/hang':
            while (true) {
                sleep(1);
            }
        case '/sleep':
            fwrite(STDERR, "sleeping in {$r->uri}\n");
            usleep((int) ($r->queryParams['ms'] ?? 100) * 1000);
            return new Response(200, [], 'slept');
        case '/leak':
            $leak[] = str_repeat('x', 10 << 20);
            return new Response(200, [], (string) getmypid());
        case '/print':
            echo "stray stdout line from the app\n";
            fwrite(STDERR, "stray stderr line from the app\n");
            var_dump(['dumped' => true]);
            return new Response(200, [], 'printed');
        case '/garbage':
            $fd = fopen('php://fd/4', 'wb');
            fwrite($fd, "this is not a frame, it is garbage\n");
            fflush($fd);
            return new Response(200, [], 'unreachable');
        case '/big':
            $mb = (int) ($r->queryParams['mb'] ?? 10);
            return new Response(200, ['Content-Type' => 'application/octet-stream'], str_repeat("0123456789abcdef", $mb << 16));
        case '/ini':
            return new Response(200, [], var_export(ini_get((string) $r->queryParams['name']), true));
        case '/status':
            return new Response((int) $r->queryParams['code'], ['X-Custom' => ['one', 'two'], 'Set-Cookie' => ['a=1', 'b=2']], 'status');
        default:
            return new Response(404, ['Content-Type' => 'text/plain'], "no route {$r->path}\n");
    }
});
