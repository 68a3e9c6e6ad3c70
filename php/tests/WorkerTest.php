<?php

declare(strict_types=1);

namespace Peregrine\Tests;

use Peregrine\Http\Request;
use Peregrine\Http\Response;
use Peregrine\Internal\Frame;
use Peregrine\Tests\Support\Frames;
use Peregrine\Tests\Support\InMemoryWorker;
use Peregrine\Worker;
use PHPUnit\Framework\TestCase;

final class WorkerTest extends TestCase
{
    /** @var array<string, string|false> */
    private array $env = [];

    protected function setUp(): void
    {
        foreach (['PEREGRINE_DEBUG', 'APP_DEBUG', 'PEREGRINE_PROTOCOL'] as $name) {
            $this->env[$name] = getenv($name);
            putenv($name);
        }
    }

    protected function tearDown(): void
    {
        foreach ($this->env as $name => $value) {
            putenv($value === false ? $name : "$name=$value");
        }
    }

    public function testCreateRefusesToRunOutsideTheServer(): void
    {
        $this->expectException(\RuntimeException::class);
        $this->expectExceptionMessage('peregrine serve worker.php');
        Worker::create();
    }

    public function testAnswersABatchInOrderWithTheRequestIds(): void
    {
        $w = new InMemoryWorker(Frames::get(3, '/one') . Frames::get(1, '/two') . Frames::get(4294967295, '/three?x=1'));
        $seen = [];
        $w->worker->serve(function (Request $r) use (&$seen): Response {
            $seen[] = $r->uri;

            return new Response(200, ['X-Uri' => $r->uri], "body of {$r->path}");
        });

        $this->assertSame(['/one', '/two', '/three?x=1'], $seen);
        $responses = $w->responses();
        $this->assertSame([3, 1, 4294967295], array_column($responses, 'id'));
        $this->assertSame(['body of /one', 'body of /two', 'body of /three'], array_column($responses, 'body'));
        $this->assertSame([['X-Uri', '/three?x=1']], $responses[2]['headers']);
        $this->assertSame([], $w->log());
    }

    public function testStopEndsServingBeforeLaterFrames(): void
    {
        $w = new InMemoryWorker(Frames::get(1, '/') . Frame::stop() . Frames::get(2, '/never'));
        $calls = 0;
        $w->worker->serve(function () use (&$calls): Response {
            ++$calls;

            return new Response();
        });

        $this->assertSame(1, $calls);
        $this->assertCount(1, $w->responses());
    }

    public function testAnExceptionBecomesA500AndTheWorkerGoesOn(): void
    {
        $w = new InMemoryWorker(Frames::get(1, '/throw') . Frames::get(2, '/ok'));
        $line = 0;
        $w->worker->serve(function (Request $r) use (&$line): Response {
            if ($r->path === '/throw') {
                $line = __LINE__ + 1;
                throw new \RuntimeException("boom\nsecond line");
            }

            return new Response(200, [], 'fine');
        });

        [$failed, $ok] = $w->responses();
        $this->assertSame(500, $failed['status']);
        $this->assertSame('Internal Server Error', $failed['body'], 'no trace without debug');
        $this->assertSame([['Content-Type', 'text/plain; charset=utf-8']], $failed['headers']);
        $this->assertSame(['id' => 2, 'status' => 200, 'headers' => [], 'body' => 'fine'], $ok);
        // One line, naming the request (several in flight interleave in a concurrent worker's log).
        $this->assertSame(['Uncaught RuntimeException: boom second line in ' . __FILE__ . ':' . $line . ' (request "GET /throw")'], $w->log());
    }

    public function testErrorsAreCaughtToo(): void
    {
        $w = new InMemoryWorker(Frames::get(1, '/'));
        $w->worker->serve(fn (Request $r): Response => new Response(200, [], strlen(null)));

        $this->assertSame(500, $w->responses()[0]['status']);
        $this->assertStringStartsWith('Uncaught TypeError: strlen()', $w->log()[0]);
    }

    /** @dataProvider debugSettings */
    public function testTheTraceIsShownOnlyInDebugMode(string $setting, bool $shown): void
    {
        putenv($setting);
        $w = new InMemoryWorker(Frames::get(1, '/'));
        $w->worker->serve(function (): Response {
            throw new \LogicException('with trace');
        });

        $body = $w->responses()[0]['body'];
        $this->assertStringStartsWith('Internal Server Error', $body);
        $this->assertSame($shown, str_contains($body, 'LogicException: with trace'), $body);
        $this->assertSame($shown, str_contains($body, '#0 '), 'the stack trace');
    }

    /** @return array<string, array{string, bool}> */
    public static function debugSettings(): array
    {
        return [
            'PEREGRINE_DEBUG=1' => ['PEREGRINE_DEBUG=1', true],
            'PEREGRINE_DEBUG=0' => ['PEREGRINE_DEBUG=0', false],
            'APP_DEBUG=1' => ['APP_DEBUG=1', true],
            'APP_DEBUG=true' => ['APP_DEBUG=true', true],
            'APP_DEBUG=0' => ['APP_DEBUG=0', false],
            'APP_DEBUG=false' => ['APP_DEBUG=false', false],
        ];
    }

    /** @dataProvider notResponses */
    public function testAHandlerReturningSomethingElseIsA500(mixed $value, string $type): void
    {
        $w = new InMemoryWorker(Frames::get(1, '/') . Frames::get(2, '/'));
        $first = true;
        $w->worker->serve(function () use ($value, &$first): mixed {
            $wasFirst = $first;
            $first = false;

            return $wasFirst ? $value : new Response(204);
        });

        $this->assertSame([500, 204], array_column($w->responses(), 'status'));
        $this->assertSame(["The handler returned $type, not a Peregrine\\Http\\Response (request \"GET /\")"], $w->log());
    }

    /** @return array<string, array{mixed, string}> */
    public static function notResponses(): array
    {
        return ['string' => ['Hello', 'string'], 'null' => [null, 'null'], 'object' => [new \stdClass(), 'stdClass']];
    }

    public function testAResponseTheProtocolCannotCarryIsA500(): void
    {
        $w = new InMemoryWorker(Frames::get(1, '/'));
        $w->worker->serve(fn (): Response => new Response(200, ['X-Bad' => "a\0b"]));

        $this->assertSame(500, $w->responses()[0]['status']);
        $this->assertStringContainsString('NUL', $w->log()[0]);
    }

    public function testResetHooksRunAfterEveryRequestWhateverHappened(): void
    {
        $w = new InMemoryWorker(Frames::get(1, '/ok') . Frames::get(2, '/throw') . Frames::get(3, '/ok'));
        $events = [];
        $same = $w->worker
            ->onReset(function () use (&$events): void {
                $events[] = 'first hook';
            })
            ->onReset(function () use (&$events): void {
                $events[] = 'failing hook';
                throw new \RuntimeException('hook failed');
            })
            ->onReset(function () use (&$events): void {
                $events[] = 'last hook';
            });
        $this->assertSame($w->worker, $same, 'onReset() returns the worker');

        $w->worker->serve(function (Request $r) use (&$events): Response {
            $events[] = "handle {$r->path}";
            if ($r->path === '/throw') {
                throw new \RuntimeException('handler failed');
            }

            return new Response();
        });

        $round = ['first hook', 'failing hook', 'last hook'];
        $this->assertSame(['handle /ok', ...$round, 'handle /throw', ...$round, 'handle /ok', ...$round], $events);
        $this->assertSame([200, 500, 200], array_column($w->responses(), 'status'));
        $log = $w->log();
        $this->assertCount(4, $log);
        $this->assertStringStartsWith('Reset hook failed: Uncaught RuntimeException: hook failed in ', $log[0]);
        $this->assertStringStartsWith('Uncaught RuntimeException: handler failed in ', $log[1]);
    }

    public function testServePsrRefusesAnIncompleteFactoryBeforeReady(): void
    {
        $w = new InMemoryWorker(Frames::get(1, '/'));
        try {
            $w->worker->servePsr(fn () => null, new \stdClass());
            $this->fail('no exception');
        } catch (\InvalidArgumentException $e) {
            $this->assertStringContainsString('ServerRequestFactoryInterface', $e->getMessage());
        }
        $this->assertSame('', $w->written(), 'nothing was served');
    }
}
