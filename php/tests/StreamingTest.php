<?php

declare(strict_types=1);

namespace Peregrine\Tests;

use Nyholm\Psr7\Factory\Psr17Factory;
use Nyholm\Psr7\Stream;
use Peregrine\Http\Request;
use Peregrine\Http\Response;
use Peregrine\Internal\CurrentRequest;
use Peregrine\Internal\Frame;
use Peregrine\Internal\PsrBridge;
use Peregrine\Tests\Support\Frames;
use Peregrine\Tests\Support\InMemoryWorker;
use PHPUnit\Framework\TestCase;
use Psr\Http\Message\ServerRequestInterface;

use function Peregrine\Http\earlyHints;

/** Streamed bodies (iterables, unseekable PSR-7 streams) and early hints under the cli runtime. */
final class StreamingTest extends TestCase
{
    private const STREAMED = Frame::FLAG_MORE | Frame::FLAG_FLUSH;

    /**
     * The frames of the answers the worker wrote after READY, decoded; the DONE frames that end
     * each request are checked, then left out.
     *
     * @return list<array{type: int, id: int, flags: int, payload: string}>
     */
    private static function frames(InMemoryWorker $w): array
    {
        $frames = Frames::split($w->written());
        array_shift($frames);
        Frames::answers($frames);

        return array_values(array_filter($frames, static fn (array $f): bool => $f['type'] !== Frame::DONE));
    }

    /** @return list<array{int, int, string}> type, flags and payload of each frame */
    private static function shapes(InMemoryWorker $w): array
    {
        return array_map(static fn (array $f): array => [$f['type'], $f['flags'], $f['type'] === Frame::RESPONSE ? Frames::response($f['payload'])['body'] : $f['payload']], self::frames($w));
    }

    public function testAGeneratorIsSentPartByPartEachFlushedBeforeTheNextIsMade(): void
    {
        $w = new InMemoryWorker(Frames::get(1, '/events') . Frames::get(2, '/after'));
        $seenBeforeSecond = '';
        $w->worker->serve(function (Request $r) use (&$w, &$seenBeforeSecond): Response {
            if ($r->path === '/after') {
                return new Response(200, [], 'next request');
            }

            return new Response(200, ['Content-Type' => 'text/event-stream'], (function () use (&$w, &$seenBeforeSecond): \Generator {
                yield "data: one\n\n";
                $seenBeforeSecond = $w->written();
                yield "data: two\n\n";
            })());
        });

        // The first part had reached the server before the generator made the second.
        $this->assertStringContainsString("data: one\n\n", $seenBeforeSecond);
        $this->assertStringNotContainsString('data: two', $seenBeforeSecond);
        $this->assertSame([
            [Frame::RESPONSE, self::STREAMED, "data: one\n\n"],
            [Frame::BODY, self::STREAMED, "data: two\n\n"],
            [Frame::BODY, 0, ''],
            [Frame::RESPONSE, 0, 'next request'],
        ], self::shapes($w));
        [$events, $next] = $w->responses();
        $this->assertSame(['id' => 1, 'status' => 200, 'headers' => [['Content-Type', 'text/event-stream']], 'body' => "data: one\n\ndata: two\n\n"], $events);
        $this->assertSame(2, $next['id']);
        $this->assertSame([], $w->log());
    }

    public function testAnEmptyPartSendsTheHeadersFirst(): void
    {
        $w = new InMemoryWorker(Frames::get(1, '/'));
        $w->worker->serve(fn (): Response => new Response(202, ['X-A' => 'b'], ['', 'x', '']));

        $this->assertSame([
            [Frame::RESPONSE, self::STREAMED, ''],
            [Frame::BODY, self::STREAMED, 'x'],
            [Frame::BODY, self::STREAMED, ''],
            [Frame::BODY, 0, ''],
        ], self::shapes($w));
        $this->assertSame(202, $w->responses()[0]['status']);
    }

    public function testAnEmptyIterableIsAnEmptyAnswer(): void
    {
        $w = new InMemoryWorker(Frames::get(1, '/'));
        $w->worker->serve(fn (): Response => new Response(204, [], new \ArrayIterator([])));

        $this->assertSame([[Frame::RESPONSE, 0, '']], self::shapes($w));
    }

    public function testPartsLargerThanAFrameAreSplit(): void
    {
        $big = str_repeat('a', Frame::MAX_BODY_PART + 10);
        $w = new InMemoryWorker(Frames::get(1, '/'));
        $w->worker->serve(fn (): Response => new Response(200, [], [$big, $big]));

        $this->assertSame([
            [Frame::RESPONSE, self::STREAMED, ''],
            [Frame::BODY, self::STREAMED, str_repeat('a', Frame::MAX_BODY_PART)],
            [Frame::BODY, self::STREAMED, 'aaaaaaaaaa'],
            [Frame::BODY, self::STREAMED, str_repeat('a', Frame::MAX_BODY_PART)],
            [Frame::BODY, self::STREAMED, 'aaaaaaaaaa'],
            [Frame::BODY, 0, ''],
        ], self::shapes($w));
        $this->assertSame($big . $big, $w->responses()[0]['body']);
    }

    public function testAFailureBeforeTheFirstPartIsA500(): void
    {
        $w = new InMemoryWorker(Frames::get(1, '/throw') . Frames::get(2, '/int') . Frames::get(3, '/header'));
        $w->worker->serve(fn (Request $r): Response => match ($r->path) {
            '/throw' => new Response(200, [], (function (): \Generator {
                throw new \RuntimeException('no data');
                yield 'never';
            })()),
            '/int' => new Response(200, [], [42]),
            default => new Response(200, ['X-Bad' => "a\0b"], ['x']),
        });

        $this->assertSame([500, 500, 500], array_column($w->responses(), 'status'));
        $log = $w->log();
        $this->assertStringStartsWith('Uncaught RuntimeException: no data in ', $log[0]);
        $this->assertStringStartsWith('Uncaught UnexpectedValueException: A streamed response body yielded int; it must yield strings', $log[1]);
        $this->assertStringContainsString('NUL', $log[2]);
    }

    public function testAFailureAfterTheFirstPartCutsTheAnswerShortAndTheWorkerGoesOn(): void
    {
        $w = new InMemoryWorker(Frames::get(1, '/stream') . Frames::get(2, '/ok'));
        $resets = 0;
        $w->worker->onReset(function () use (&$resets): void {
            ++$resets;
        })->serve(fn (Request $r): Response => $r->path === '/ok' ? new Response(200, [], 'ok') : new Response(200, [], (function (): \Generator {
            yield 'begun';
            throw new \RuntimeException('database gone');
        })()));

        $this->assertSame([
            [Frame::RESPONSE, self::STREAMED, 'begun'],
            [Frame::BODY, 0, ''],
            [Frame::RESPONSE, 0, 'ok'],
        ], self::shapes($w));
        $this->assertSame(2, $resets);
        $this->assertStringStartsWith('A streamed response was cut short: Uncaught RuntimeException: database gone in ', $w->log()[0]);
    }

    public function testSessionHeadersGoWithAStreamedAnswer(): void
    {
        $w = new InMemoryWorker(Frames::get(1, '/'));
        $w->worker->serve(fn (): Response => new Response(200, ['Set-Cookie' => 'a=1'], ['x']));

        $this->assertSame([['Set-Cookie', 'a=1']], $w->responses()[0]['headers']);
    }

    public function testEarlyHintsGoBeforeTheAnswerWithItsId(): void
    {
        $w = new InMemoryWorker(Frames::get(7, '/page') . Frames::get(8, '/stream'));
        $results = [];
        $w->worker->serve(function (Request $r) use (&$results): Response {
            $results[] = earlyHints(['Link' => ['</app.css>; rel=preload; as=style', '</app.js>; rel=preload; as=script']]);
            $results[] = earlyHints([]);
            if ($r->path === '/page') {
                return new Response(200, ['Content-Type' => 'text/html'], 'page');
            }

            return new Response(200, [], (function () use (&$results): \Generator {
                yield 'a';
                $results[] = earlyHints(['Link' => '</late.css>; rel=preload']); // the answer has begun
                yield 'b';
            })());
        });

        $this->assertSame([true, false, true, false, false], $results);
        $frames = self::frames($w);
        $this->assertSame([Frame::HINTS, Frame::RESPONSE, Frame::HINTS, Frame::RESPONSE, Frame::BODY, Frame::BODY], array_column($frames, 'type'));
        $this->assertSame([7, 7, 8, 8, 8, 8], array_column($frames, 'id'));
        $this->assertSame("Link\0</app.css>; rel=preload; as=style\0Link\0</app.js>; rel=preload; as=script", $frames[0]['payload']);
    }

    public function testEarlyHintsOutsideARequestDoNothing(): void
    {
        CurrentRequest::$id = 0;
        $this->assertFalse(earlyHints(['Link' => '</a.css>; rel=preload']));
    }

    public function testEarlyHintsRefuseWhatTheProtocolCannotCarry(): void
    {
        $w = new InMemoryWorker(Frames::get(1, '/'));
        $w->worker->serve(fn (): Response => new Response(200, [], (string) earlyHints(['Link' => "a\0b"])));

        $this->assertSame(500, $w->responses()[0]['status']);
        $this->assertStringContainsString('NUL', $w->log()[0]);
    }

    public function testAnUnseekablePsrBodyIsStreamedInReads(): void
    {
        if (!class_exists(Psr17Factory::class)) {
            $this->markTestSkipped('nyholm/psr7 is not installed');
        }
        $factory = new Psr17Factory();
        $w = new InMemoryWorker(Frames::get(1, '/pipe') . Frames::get(2, '/seekable'));
        $w->worker->servePsr(function (ServerRequestInterface $r) use ($factory): mixed {
            if ($r->getUri()->getPath() === '/seekable') {
                return $factory->createResponse(200)->withBody($factory->createStream('whole'));
            }
            $pipe = popen('head -c 100000 /dev/zero', 'rb');

            return $factory->createResponse(200)->withHeader('Content-Type', 'application/octet-stream')->withBody(Stream::create($pipe));
        }, $factory);

        $frames = self::frames($w);
        $streamed = array_slice($frames, 0, -1);
        $this->assertSame(Frame::RESPONSE, $streamed[0]['type']);
        foreach ($streamed as $i => $f) {
            $this->assertSame($i === \count($streamed) - 1 ? 0 : self::STREAMED, $f['flags']);
            $this->assertLessThanOrEqual(65536, \strlen($f['type'] === Frame::RESPONSE ? Frames::response($f['payload'])['body'] : $f['payload']));
        }
        $this->assertGreaterThanOrEqual(3, \count($streamed)); // two reads at least, and the end
        [$pipe, $seekable] = $w->responses();
        $this->assertSame(str_repeat("\0", 100000), $pipe['body']);
        $this->assertSame([['Content-Type', 'application/octet-stream']], $pipe['headers']);
        $this->assertSame([Frame::RESPONSE, 0], [end($frames)['type'], end($frames)['flags']]);
        $this->assertSame('whole', $seekable['body']);
    }

    public function testPsrPartsAreNullForASeekableBodyAndCloseTheStreamWhenRead(): void
    {
        if (!class_exists(Psr17Factory::class)) {
            $this->markTestSkipped('nyholm/psr7 is not installed');
        }
        $factory = new Psr17Factory();
        $this->assertNull(PsrBridge::parts($factory->createResponse()->withBody($factory->createStream('x'))));

        $pipe = popen('printf abc', 'rb');
        $body = Stream::create($pipe);
        $parts = PsrBridge::parts($factory->createResponse()->withBody($body));
        $this->assertSame(['abc'], iterator_to_array($parts, false));
        $this->assertNull($body->detach()); // closed
    }
}
