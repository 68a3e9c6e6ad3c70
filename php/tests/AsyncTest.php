<?php

declare(strict_types=1);

namespace Peregrine\Tests;

use Peregrine\Async\CancelledException;
use Peregrine\Async\Future;
use Peregrine\Async\Internal\Loop;
use Peregrine\Async\TimeoutException;
use PHPUnit\Framework\TestCase;

use function Peregrine\Async\async;
use function Peregrine\Async\await;
use function Peregrine\Async\awaitAll;
use function Peregrine\Async\delay;

final class AsyncTest extends TestCase
{
    public function testAwaitReturnsTheValueOfTheWork(): void
    {
        $f = async(static fn (int $a, int $b): int => $a + $b, 2, 3);
        self::assertInstanceOf(Future::class, $f);
        self::assertSame(5, await($f));
        self::assertTrue($f->isComplete());
    }

    public function testAwaitThrowsWhatTheWorkThrew(): void
    {
        $f = async(static function (): never {
            delay(0.001);
            throw new \DomainException('broken');
        });
        $this->expectException(\DomainException::class);
        $this->expectExceptionMessage('broken');
        await($f);
    }

    public function testFibersInterleaveAtTheirWaits(): void
    {
        $log = [];
        $work = static function (string $name, float $wait) use (&$log): string {
            $log[] = "$name start";
            delay($wait);
            $log[] = "$name end";

            return $name;
        };
        $values = awaitAll(['slow' => async($work, 'slow', 0.03), 'fast' => async($work, 'fast', 0.001)]);
        self::assertSame(['slow' => 'slow', 'fast' => 'fast'], $values);
        // Both started before either ended, and the shorter wait ended first.
        self::assertSame(['slow start', 'fast start', 'fast end', 'slow end'], $log);
    }

    public function testManyFibersEachKeepTheirOwnState(): void
    {
        $futures = [];
        for ($i = 0; $i < 200; ++$i) {
            $futures[] = async(static function (int $i): int {
                $mine = $i * 7;
                delay(mt_rand(0, 3) / 1000);
                delay(0);

                return $mine;
            }, $i);
        }
        $values = awaitAll($futures);
        foreach ($values as $i => $v) {
            self::assertSame($i * 7, $v);
        }
        self::assertCount(200, $values);
    }

    public function testAFiberWhoseWorkEndedRunsTheNextWork(): void
    {
        $fiber = static fn (): int => spl_object_id(\Fiber::getCurrent());
        $first = await(async($fiber));
        self::assertSame($first, await(async($fiber)), 'the second work ran in a new fiber');

        // A late cancel of the first work's Future leaves the fiber's next work alone.
        $done = async(static fn (): int => 1);
        self::assertSame(1, await($done));
        $next = async(static function (): string {
            delay(0.005);

            return 'not cancelled';
        });
        $done->cancel();
        self::assertSame('not cancelled', await($next));
    }

    public function testBeforeWaitRunsAfterTheResumedFibersOfEachTick(): void
    {
        $loop = Loop::get();
        $log = [];
        $id = $loop->beforeWait(static function () use (&$log): void {
            $log[] = 'before wait';
        });
        try {
            awaitAll([
                async(static function () use (&$log): void {
                    delay(0.001);
                    $log[] = 'a';
                }),
                async(static function () use (&$log): void {
                    delay(0.001);
                    $log[] = 'b';
                }),
            ]);
        } finally {
            $loop->cancel($id);
        }
        // Both fibers started in one tick and ended in one, each followed by the callback.
        $ended = array_search('a', $log, true);
        self::assertNotFalse($ended);
        self::assertSame(['a', 'b', 'before wait'], \array_slice($log, $ended, 3));
        $count = \count($log);
        $loop->run(static fn (): bool => true);
        delay(0.001);
        self::assertCount($count, $log, 'a cancelled callback ran');
    }

    public function testIdleFibersAreBounded(): void
    {
        $ids = [];
        $work = static function () use (&$ids): void {
            delay(0.001);
            $ids[spl_object_id(\Fiber::getCurrent())] = true;
        };
        $idle = new \ReflectionProperty(Loop::class, 'idle');
        foreach ([1, 2] as $round) {
            $ids = [];
            awaitAll(array_map(static fn (): Future => async($work), range(1, 300)));
            self::assertCount(300, $ids, "round $round: 300 works at once need 300 fibers");
            self::assertCount(256, $idle->getValue(Loop::get()), "round $round: 256 fibers kept, 44 ended");
        }
    }

    public function testAwaitInsideAFiberWaitsForAnotherFiber(): void
    {
        $outer = async(static function (): string {
            $inner = async(static function (): string {
                delay(0.002);

                return 'inner';
            });

            return 'outer+' . await($inner);
        });
        self::assertSame('outer+inner', await($outer));
    }

    public function testTimeoutCancelsTheWorkAndRunsItsFinallyBlocks(): void
    {
        $cleaned = false;
        $reached = false;
        $f = async(static function () use (&$cleaned, &$reached): void {
            try {
                delay(10);
                $reached = true;
            } finally {
                $cleaned = true;
            }
        });
        try {
            await($f, 0.01);
            self::fail('await() returned');
        } catch (TimeoutException $e) {
            self::assertStringContainsString('Timed out', $e->getMessage());
        }
        // The cancellation is delivered at the fiber's wait on the next tick.
        Loop::get()->run(static fn (): bool => $f->isComplete());
        self::assertTrue($cleaned);
        self::assertFalse($reached);
        $this->expectException(CancelledException::class);
        await($f);
    }

    public function testCancelBeforeTheFiberStartedStopsItAtItsFirstWait(): void
    {
        $after = false;
        $f = async(static function () use (&$after): void {
            delay(0.001);
            $after = true;
        });
        $f->cancel();
        try {
            await($f);
            self::fail('await() returned');
        } catch (CancelledException) {
        }
        self::assertFalse($after);
    }

    public function testAwaitAllThrowsTheFirstFailureAfterAllComplete(): void
    {
        $done = false;
        $futures = [
            async(static function (): never {
                throw new \RuntimeException('first');
            }),
            async(static function () use (&$done): string {
                delay(0.005);
                $done = true;

                return 'ok';
            }),
        ];
        try {
            awaitAll($futures);
            self::fail('awaitAll() returned');
        } catch (\RuntimeException $e) {
            self::assertSame('first', $e->getMessage());
        }
        self::assertTrue($done);
    }

    public function testPlainFibersKeepTheirOwnProtocol(): void
    {
        // A user's Fiber that awaits blocks as plain code would, and its suspend/resume stay its own.
        $fiber = new \Fiber(static function (): string {
            $x = \Fiber::suspend('first');
            $y = await(async(static function (): string {
                delay(0.001);

                return 'async';
            }));

            return "$x+$y";
        });
        self::assertSame('first', $fiber->start());
        $fiber->resume('resumed');
        self::assertTrue($fiber->isTerminated());
        self::assertSame('resumed+async', $fiber->getReturn());
    }

    public function testDelayOutsideAFiberRunsTheLoopMeanwhile(): void
    {
        $fired = false;
        Loop::get()->delay(0.002, static function () use (&$fired): void {
            $fired = true;
        });
        delay(0.02);
        self::assertTrue($fired);
    }

    public function testStreamsWakeTheFiberThatWaitsForThem(): void
    {
        [$a, $b] = stream_socket_pair(STREAM_PF_UNIX, STREAM_SOCK_STREAM, STREAM_IPPROTO_IP);
        stream_set_blocking($a, false);
        $loop = Loop::get();
        $reader = async(static function () use ($a, $loop): string {
            $suspension = $loop->suspension();
            $id = $loop->onReadable($a, static fn () => $suspension->resume());
            $suspension->onSettle(static fn () => $loop->cancel($id));
            $suspension->suspend();

            return (string) fread($a, 100);
        });
        async(static function () use ($b): void {
            delay(0.002);
            fwrite($b, 'ping');
        });
        self::assertSame('ping', await($reader));
        fclose($a);
        fclose($b);
    }

    public function testAwaitingWhatNothingCanCompleteIsADeadlock(): void
    {
        $this->expectException(\LogicException::class);
        $this->expectExceptionMessage('Deadlock');
        await(new Future());
    }

    public function testABlockingFiberIsReported(): void
    {
        $lines = [];
        $loop = Loop::get();
        $loop->setWarn(static function (string $line) use (&$lines): void {
            $lines[] = $line;
        });
        try {
            await($loop->spawn(static function (): void {
                usleep(120_000); // plain blocking code: not hooked outside the native runtime
            }, '/slow/path'));
        } finally {
            $loop->setWarn(static function (string $line): void {
                file_put_contents('php://stderr', $line . "\n");
            });
        }
        self::assertCount(1, $lines);
        self::assertStringContainsString('/slow/path', $lines[0]);
    }
}
