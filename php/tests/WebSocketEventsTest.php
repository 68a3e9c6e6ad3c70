<?php

declare(strict_types=1);

namespace Peregrine\Tests;

use Peregrine\Http\EventStream;
use Peregrine\Http\Request;
use Peregrine\Internal\WebSocketEvents;
use Peregrine\WebSocket\Connection;
use Peregrine\WebSocket\Handler;
use Peregrine\WebSocket\Refused;
use PHPUnit\Framework\TestCase;

/**
 * The WebSocket event and reply vectors in testdata/websocket/vectors.json, shared with the Go
 * suite (internal/websocket/event_test.go), and the decoder's refusals.
 */
final class WebSocketEventsTest extends TestCase
{
    private const VECTORS = __DIR__ . '/../../testdata/websocket/vectors.json';
    private const KEY = '0123456789abcdef0123456789abcdef';

    /** @return list<array<string, mixed>> */
    private static function vectors(): array
    {
        return json_decode((string) file_get_contents(self::VECTORS), true, 512, JSON_THROW_ON_ERROR);
    }

    public function testEventsDecodeAsGoEncodedThem(): void
    {
        $n = 0;
        foreach (self::vectors() as $v) {
            if ($v['kind'] !== 'event') {
                continue;
            }
            $e = WebSocketEvents::decode((string) hex2bin($v['hex']));
            $want = $v['event'];
            self::assertSame($want['Kind'], $e['kind'], $v['name']);
            self::assertSame($want['ID'], $e['id'], $v['name']);
            self::assertSame($want['Binary'], $e['binary'], $v['name']);
            self::assertSame($want['Code'], $e['code'], $v['name']);
            self::assertSame($want['Reason'], $e['reason'], $v['name']);
            self::assertSame(base64_decode((string) ($want['Attributes'] ?? ''), true), $e['attributes'], $v['name']);
            self::assertSame(base64_decode((string) ($want['Data'] ?? ''), true), $e['data'], $v['name']);
            ++$n;
        }
        self::assertSame(4, $n);
    }

    public function testRepliesEncodeAsGoDecodesThem(): void
    {
        $n = 0;
        foreach (self::vectors() as $v) {
            if ($v['kind'] !== 'reply') {
                continue;
            }
            $r = $v['reply'];
            $actions = [];
            foreach ($r['Actions'] ?? [] as $a) {
                $actions[] = [$a['Op'], $a['Binary'], $a['Code'], (string) base64_decode((string) ($a['Data'] ?? ''), true)];
            }
            $attributes = $r['AttributesSet'] ? (string) base64_decode((string) $r['Attributes'], true) : null;
            self::assertSame($v['hex'], bin2hex(WebSocketEvents::reply($attributes, $actions)), $v['name']);
            ++$n;
        }
        self::assertSame(2, $n);
    }

    /** Random bytes and mutations of real events: the decoder refuses or decodes, never more. */
    public function testDecodeFuzz(): void
    {
        mt_srand(26);
        $seeds = array_map(static fn (array $v): string => (string) hex2bin($v['hex']), array_filter(self::vectors(), static fn (array $v): bool => $v['kind'] === 'event'));
        for ($i = 0; $i < 20000; ++$i) {
            $b = $seeds[array_rand($seeds)];
            for ($m = mt_rand(1, 4); $m > 0; --$m) {
                $at = mt_rand(0, max(0, \strlen($b) - 1));
                $b = match (mt_rand(0, 2)) {
                    0 => substr_replace($b, \chr(mt_rand(0, 255)), $at, 1),
                    1 => substr($b, 0, $at),
                    default => $b . random_bytes(mt_rand(1, 8)),
                };
            }
            try {
                $e = WebSocketEvents::decode($b);
                self::assertLessThanOrEqual(\strlen($b), \strlen($e['id'] . $e['attributes'] . $e['reason'] . $e['data']) + 48);
            } catch (\UnexpectedValueException) {
                // refused, as it should be
            }
        }
        self::assertTrue(true);
    }

    public function testOnlyTheServersKeyMakesAnEvent(): void
    {
        putenv('PEREGRINE_WEBSOCKET_KEY=' . self::KEY);
        $event = (string) hex2bin(self::vectors()[1]['hex']);
        self::assertTrue(WebSocketEvents::isEvent('WEBSOCKET', $event));
        self::assertFalse(WebSocketEvents::isEvent('GET', $event));
        $forged = substr_replace($event, 'X', 16, 1);
        self::assertFalse(WebSocketEvents::isEvent('WEBSOCKET', $forged));
        self::assertFalse(WebSocketEvents::isEvent('WEBSOCKET', 'short'));
    }

    public function testHandleAnswers(): void
    {
        $handler = new class () implements Handler {
            public function onOpen(Connection $c, Request $upgrade): void
            {
                if ($upgrade->path === '/no') {
                    throw new Refused(401, 'who are you');
                }
                $c->attributes = ['path' => $upgrade->path];
                $c->join('room');
            }

            public function onMessage(Connection $c, string $data, bool $binary): void
            {
                if ($data === 'throw') {
                    throw new \RuntimeException('boom');
                }
                $c->send($data . ' from ' . $c->attributes['user']);
            }

            public function onClose(Connection $c, int $code, string $reason): void
            {
            }
        };
        $open = static fn (string $uri): Request => new Request(method: 'WEBSOCKET', uri: $uri, body: (string) hex2bin(self::vectors()[0]['hex']));
        $r = WebSocketEvents::handle($handler, $open('/chat'));
        self::assertSame(200, $r->status);
        self::assertSame(['X-Peregrine-WebSocket' => 'accept'], $r->headers);
        self::assertSame(WebSocketEvents::reply('{"path":"/chat"}', [[3, false, 0, 'room']]), $r->body);
        $r = WebSocketEvents::handle($handler, $open('/no'));
        self::assertSame(401, $r->status);
        self::assertSame('who are you', $r->body);

        $message = (string) hex2bin(self::vectors()[1]['hex']); // "héllo" from ann, attributes unchanged
        $r = WebSocketEvents::handle($handler, new Request(method: 'WEBSOCKET', body: $message));
        self::assertSame(200, $r->status);
        self::assertSame(WebSocketEvents::reply(null, [[1, false, 0, 'héllo from ann']]), $r->body);

        $throw = substr($message, 0, -\strlen('héllo')) . 'throw';
        self::assertSame(500, WebSocketEvents::handle($handler, new Request(method: 'WEBSOCKET', body: $throw))->status);
    }

    public function testConnectionRefusesWhatTheServerCannotSend(): void
    {
        $c = new Connection('n.1');
        foreach ([
            static fn () => $c->send("\xff\xfe"),            // text that is not UTF-8
            static fn () => $c->close(1006),                  // reserved for "no close frame"
            static fn () => $c->close(2000),
            static fn () => $c->close(1000, str_repeat('r', 124)),
        ] as $i => $call) {
            try {
                $call();
                self::fail("case {$i} was accepted");
            } catch (\InvalidArgumentException) {
            }
        }
        $c->send("\xff", true);
        $c->close(4000, 'bye');
        self::assertSame([[1, true, 0, "\xff"], [2, false, 4000, 'bye']], $c->actions());
    }

    public function testRefusedNeedsAnHttpStatus(): void
    {
        self::assertSame(429, (new Refused(429, 'slow down'))->status);
        $this->expectException(\InvalidArgumentException::class);
        new Refused(101);
    }

    public function testEventStreamSubscribe(): void
    {
        $r = EventStream::subscribe(['a', 'b:1'], '17-0');
        self::assertSame(200, $r->status);
        self::assertSame(['X-Peregrine-Event-Stream' => ['a', 'b:1'], 'X-Peregrine-Last-Event-Id' => '17-0'], $r->headers);
        self::assertSame(['X-Peregrine-Event-Stream' => ['a']], EventStream::subscribe(['a'], "bad\nid")->headers);
        foreach ([[], [''], ["a\r\nX-Injected: 1"]] as $channels) {
            try {
                EventStream::subscribe($channels);
                self::fail('accepted ' . json_encode($channels));
            } catch (\InvalidArgumentException) {
            }
        }
    }
}
