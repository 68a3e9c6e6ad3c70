<?php
// An HTTP worker for the jobs tests: pushes jobs and uses KV stores through the server.
//   POST /push?pipeline=P[&n=N][&delay=S]   body: the payload's JSON; answers the ids, one a line
//   GET  /kv?store=S&op=get|set|has|delete|incr&key=K[&value=JSON][&ttl=S]
//   GET  /psr16   a round of PSR-16 calls through Peregrine\KV\SimpleCache; answers their results
//   POST /noop    answers the body's length: the baseline of the push latency
// A refused call answers 400 with the exception's message.
declare(strict_types=1);

require __DIR__ . '/../../php/autoload.php';

use Peregrine\Http\Request;
use Peregrine\Http\Response;
use Peregrine\Jobs;
use Peregrine\KV;

Peregrine\Worker::create()->serve(static function (Request $r): Response {
    $q = $r->queryParams;
    try {
        switch ($r->path) {
            case '/push':
                $payload = json_decode($r->body === '' ? 'null' : $r->body, true, 512, JSON_THROW_ON_ERROR);
                $ids = [];
                for ($i = 0, $n = (int) ($q['n'] ?? 1); $i < $n; $i++) {
                    $ids[] = Jobs::push((string) $q['pipeline'], $payload, delay: (float) ($q['delay'] ?? 0), headers: ['from' => 'http']);
                }
                return new Response(200, [], implode("\n", $ids));
            case '/kv':
                $kv = KV::store((string) ($q['store'] ?? 'default'));
                $key = (string) $q['key'];
                $result = match ($q['op']) {
                    'get' => $kv->get($key, 'missing'),
                    'set' => $kv->set($key, json_decode((string) $q['value'], true), isset($q['ttl']) ? (float) $q['ttl'] : null),
                    'has' => $kv->has($key),
                    'delete' => $kv->delete($key),
                    'incr' => $kv->incr($key, (int) ($q['by'] ?? 1)),
                };
                return new Response(200, [], json_encode($result, JSON_THROW_ON_ERROR));
            case '/noop':
                return new Response(200, [], (string) strlen($r->body));
            case '/psr16':
                require_once '/usr/share/php/Psr/SimpleCache/autoload.php';
                $cache = new Peregrine\KV\SimpleCache('default');
                $out = [$cache->set('p', ['a' => 1], 60), $cache->get('p'), $cache->has('p'), $cache->delete('p'),
                    $cache->get('p', 'gone'), $cache->setMultiple(['x' => 1, 'y' => 2]), $cache->getMultiple(['x', 'y', 'z']),
                    $cache->set('old', 1, -1), $cache->has('old')];
                try {
                    $cache->get('bad:key');
                } catch (Psr\SimpleCache\InvalidArgumentException $e) {
                    $out[] = 'invalid';
                }
                return new Response(200, [], json_encode($out, JSON_THROW_ON_ERROR));
        }
    } catch (Throwable $e) {
        return new Response(400, [], $e::class . ': ' . $e->getMessage());
    }
    return new Response(404);
});
