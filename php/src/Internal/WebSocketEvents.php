<?php

declare(strict_types=1);

namespace Peregrine\Internal;

use Peregrine\Http\Request;
use Peregrine\Http\Response;
use Peregrine\WebSocket\Connection;
use Peregrine\WebSocket\Handler;
use Peregrine\WebSocket\Refused;

/**
 * WebSocketEvents turns the server's WebSocket events into calls of a Handler, on both
 * runtimes. An event is a request with method WEBSOCKET whose body carries the server's key
 * (PEREGRINE_WEBSOCKET_KEY) and the event (docs/websocket.md, "Events on the wire"); any other
 * request, a client's forged WEBSOCKET request included, goes to the ordinary handler.
 *
 * The answer: 200 with the reply (and, from onOpen, X-Peregrine-WebSocket: accept), the
 * Refused status, or 500 when the handler threw (the server closes the connection with 1011).
 *
 * @internal
 */
final class WebSocketEvents
{
    private const HEAD = 16;
    private const KEY_LENGTH = 32;

    /** The header of an answer to onOpen that accepts the connection. */
    public const ACCEPT = 'X-Peregrine-WebSocket';

    private static ?string $key = null;

    /** Whether a request is an event from the server. */
    public static function isEvent(string $method, string $body): bool
    {
        if ($method !== 'WEBSOCKET' || \strlen($body) < self::HEAD + self::KEY_LENGTH) {
            return false;
        }
        self::$key ??= (string) getenv('PEREGRINE_WEBSOCKET_KEY');

        return \strlen(self::$key) === self::KEY_LENGTH && hash_equals(self::$key, substr($body, self::HEAD, self::KEY_LENGTH));
    }

    /**
     * Wraps a serve() handler so that events go to $websocket.
     *
     * @param callable(Request): mixed $handler
     *
     * @return \Closure(Request): mixed
     */
    public static function wrap(callable $handler, Handler $websocket): \Closure
    {
        return static function (Request $request) use ($handler, $websocket): mixed {
            if (!self::isEvent($request->method, $request->body)) {
                return $handler($request);
            }

            return self::handle($websocket, $request);
        };
    }

    /**
     * Decodes an event.
     *
     * @return array{kind: int, binary: bool, code: int, id: string, attributes: string, reason: string, data: string}
     *
     * @throws \UnexpectedValueException if $body is not an event
     */
    public static function decode(string $body): array
    {
        $length = \strlen($body);
        if ($length < self::HEAD + self::KEY_LENGTH) {
            throw new \UnexpectedValueException("A WebSocket event of {$length} bytes");
        }
        $h = unpack('Ckind/Cflags/vcode/Vid/Vattributes/Vreason', $body);
        if ($h['kind'] < 1 || $h['kind'] > 3 || ($h['flags'] & ~1) !== 0) {
            throw new \UnexpectedValueException("A WebSocket event of kind {$h['kind']} with flags {$h['flags']}");
        }
        $at = self::HEAD + self::KEY_LENGTH;
        if ($h['id'] + $h['attributes'] + $h['reason'] > $length - $at) {
            throw new \UnexpectedValueException('A WebSocket event whose lengths pass its end');
        }
        $id = substr($body, $at, $h['id']);
        $at += $h['id'];
        $attributes = substr($body, $at, $h['attributes']);
        $at += $h['attributes'];
        $reason = substr($body, $at, $h['reason']);
        $at += $h['reason'];

        return ['kind' => $h['kind'], 'binary' => ($h['flags'] & 1) === 1, 'code' => $h['code'], 'id' => $id,
            'attributes' => $attributes, 'reason' => $reason, 'data' => (string) substr($body, $at)];
    }

    /**
     * Encodes what a handler asked of its connection: the reply the server applies.
     *
     * @param list<array{int, bool, int, string}> $actions
     */
    public static function reply(?string $attributes, array $actions): string
    {
        $out = pack('CV', $attributes === null ? 0 : 1, \strlen($attributes ?? '')) . ($attributes ?? '');
        foreach ($actions as [$op, $binary, $code, $data]) {
            $out .= pack('CCvV', $op, $binary ? 1 : 0, $code, \strlen($data)) . $data;
        }

        return $out;
    }

    /** Runs one event on $websocket and returns the answer for the server. */
    public static function handle(Handler $websocket, Request $request): Response
    {
        try {
            $event = self::decode($request->body);
        } catch (\UnexpectedValueException $e) {
            self::log($e->getMessage());

            return new Response(500);
        }
        $attributes = [];
        if ($event['attributes'] !== '') {
            $decoded = json_decode($event['attributes'], true);
            $attributes = \is_array($decoded) ? $decoded : [];
        }
        $c = new Connection($event['id'], $attributes);
        try {
            match ($event['kind']) {
                1 => $websocket->onOpen($c, self::upgrade($request)),
                2 => $websocket->onMessage($c, $event['data'], $event['binary']),
                default => $websocket->onClose($c, $event['code'], $event['reason']),
            };
        } catch (Refused $e) {
            if ($event['kind'] === 1) {
                return new Response($e->status, ['Content-Type' => 'text/plain; charset=utf-8'], $e->getMessage());
            }
            self::log('Refused thrown outside onOpen, connection ' . $event['id'] . ': ' . Handling::describe($e));

            return new Response(500);
        } catch (\Throwable $e) {
            $where = ['', 'onOpen', 'onMessage', 'onClose'][$event['kind']];
            self::log("{$where} failed for WebSocket connection {$event['id']}: " . Handling::describe($e));

            return new Response(500);
        }
        $changed = null;
        if ($c->attributes !== $attributes) {
            $changed = json_encode($c->attributes, JSON_UNESCAPED_SLASHES | JSON_UNESCAPED_UNICODE | JSON_PRESERVE_ZERO_FRACTION | JSON_INVALID_UTF8_SUBSTITUTE);
            if ($changed === false) {
                self::log("The attributes of WebSocket connection {$event['id']} cannot be kept (not JSON): " . json_last_error_msg());
                $changed = null;
            }
        }

        // Not 101: the native runtime sends a 1xx status as Early Hints. The header says accepted.
        return new Response(200, $event['kind'] === 1 ? [self::ACCEPT => 'accept'] : [], self::reply($changed, $c->actions()));
    }

    /** The upgrade request as the client sent it, for onOpen. */
    private static function upgrade(Request $r): Request
    {
        $headers = $r->headers;
        unset($headers['content-length']);

        return new Request(method: 'GET', uri: $r->uri, headers: $headers, remoteAddr: $r->remoteAddr, remotePort: $r->remotePort,
            serverAddr: $r->serverAddr, serverPort: $r->serverPort, scheme: $r->scheme, protocol: $r->protocol);
    }

    private static function log(string $message): void
    {
        @file_put_contents('php://stderr', strtr($message, ["\n" => ' ', "\r" => ' ']) . "\n");
    }
}
