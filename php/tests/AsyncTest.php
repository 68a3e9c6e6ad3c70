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

    /**
     * Each work runs in a new Fiber, never in one whose work ended: what a library keeps per
     * fiber (a WeakMap keyed by Fiber::getCurrent()) is gone for the next work, one after another
     * and side by side.
     */
    public function testEveryWorkRunsInAFiberOfItsOwn(): void
    {
        $perFiber = new \WeakMap();
        $work = static function () use ($perFiber): bool {
            $seen = isset($perFiber[\Fiber::getCurrent()]);
            $perFiber[\Fiber::getCurrent()] = 'the user of an earlier work';
            delay(0.001);

            return $seen;
        };
        for ($i = 0; $i < 3; ++$i) {
            self::assertFalse(await(async($work)), "work $i saw an earlier work's fiber");
        }
        self::assertSame(array_fill(0, 50, false), awaitAll(array_map(static fn (): Future => async($work), range(1, 50))));
        self::assertCount(0, $perFiber, 'an ended fiber is kept');

        // A late cancel of an ended work's Future touches no later work.
        $done = async(static fn (): int => 1);
        self::assertSame(1, await($done));
        $next = async(static function (): string {
            delay(0.005);

            return 'not cancelled';
        });
        $done->cancel();
        self::assertSame('not cancelled', await($next));
    }

    /**
     * A cancel is never lost, whatever state the fiber is in when it comes (a request's CANCEL
     * must end it, or the server kills the whole worker). Each case's work waits a minute after
     * the point it is cancelled at; await()'s deadline tells a lost cancel from a kept one.
     *
     * @return iterable<string, array{\Closure(\Closure(): void): \Closure(): mixed, bool}>
     *         a setup given cancel(), returning the work's Future's result getter; whether
     *         the work must fail with the cancellation
     */
    public static function cancelStates(): iterable
    {
        yield 'not started: its work never runs' => [static function (\Closure $cancel): \Closure {
            $ran = false;
            $f = async(static function () use (&$ran): void {
                $ran = true;
            });
            $cancel($f);

            return static function () use ($f, &$ran): mixed {
                try {
                    return await($f, 5);
                } finally {
                    self::assertFalse($ran, 'the work of a task cancelled before it started ran');
                }
            };
        }, true];
        yield 'waiting' => [static function (\Closure $cancel): \Closure {
            $started = false;
            $f = async(static function () use (&$started): void {
                $started = true;
                Loop::get()->suspension()->suspend(); // a wait only the cancel ends
            });
            Loop::get()->run(static fn (): bool => $started);
            $cancel($f);

            return static fn (): mixed => await($f, 5);
        }, true];
        yield 'woken, not yet resumed: it keeps what it waited for' => [static function (\Closure $cancel): \Closure {
            $s = null;
            $got = null;
            $f = async(static function () use (&$s, &$got): void {
                $s = Loop::get()->suspension();
                $got = $s->suspend();
                delay(60);
            });
            Loop::get()->run(static fn (): bool => $s !== null);
            $s->resume('the value');
            $cancel($f);

            return static function () use ($f, &$got): mixed {
                try {
                    return await($f, 5);
                } finally {
                    self::assertSame('the value', $got);
                }
            };
        }, true];
        yield 'woken by a timeout, not yet resumed' => [static function (\Closure $cancel): \Closure {
            $s = null;
            $f = async(static function () use (&$s): void {
                $s = Loop::get()->suspension();
                try {
                    $s->suspend();
                } catch (\RuntimeException) {
                }
                delay(60);
            });
            Loop::get()->run(static fn (): bool => $s !== null);
            $s->throw(new \RuntimeException('its own timeout'));
            $cancel($f);

            return static fn (): mixed => await($f, 5);
        }, true];
        yield 'running: cancelled by itself' => [static function (\Closure $cancel): \Closure {
            $self = null;
            $f = async(static function () use (&$self, $cancel): void {
                $cancel($self);
                delay(60);
            });
            $self = $f;

            return static fn (): mixed => await($f, 5);
        }, true];
        yield 'running a plain Fiber that waits' => [static function (\Closure $cancel): \Closure {
            $f = null;
            $canceller = async(static function () use (&$f, $cancel): void {
                delay(0.01);
                $cancel($f);
            });
            $f = async(static function (): void {
                $plain = new \Fiber(static fn () => delay(60));
                $plain->start();
            });

            return static function () use ($f, $canceller): mixed {
                await($canceller);

                return await($f, 5);
            };
        }, true];
        yield 'ended, its Future not yet observed: it keeps its value' => [static function (\Closure $cancel): \Closure {
            $f = async(static fn (): string => 'answered');
            Loop::get()->run(static fn (): bool => $f->isComplete());
            $cancel($f);

            return static fn (): mixed => await($f, 5);
        }, false];
    }

    /** @dataProvider cancelStates */
    public function testACancelIsNeverLost(\Closure $setup, bool $fails): void
    {
        $reason = new CancelledException('the server cancelled it');
        $result = $setup(static function (?Future $f) use ($reason): void {
            $f?->cancel($reason);
        });
        try {
            $value = $result();
            self::assertFalse($fails, 'the work ran to its end: the cancel was lost');
            self::assertSame('answered', $value);
        } catch (TimeoutException $e) {
            self::fail('the cancel was lost: the work still waited after 5 s');
        } catch (CancelledException $e) {
            self::assertTrue($fails);
            self::assertSame($reason, $e);
        }
    }

    /**
     * A failure nobody awaits is logged once its Future is dropped; one that was awaited, a
     * cancellation, and a success are not.
     */
    public function testAFailureNobodyAwaitsIsLogged(): void
    {
        $loop = Loop::get();
        $warn = new \ReflectionProperty(Loop::class, 'warn');
        $saved = $warn->getValue($loop);
        $log = [];
        $loop->setWarn(static function (string $line) use (&$log): void {
            $log[] = $line;
        });
        try {
            $ignored = async(static function (): never {
                delay(0.001);
                throw new \DomainException('nobody saw me');
            });
            $awaited = async(static fn (): never => throw new \DomainException('seen'));
            $cancelled = async(static fn () => delay(10));
            $fine = async(static fn (): int => 1);
            $loop->run(static fn (): bool => $awaited->isComplete() && $fine->isComplete());
            $cancelled->cancel();
            try {
                await($awaited);
            } catch (\DomainException) {
            }
            $loop->run(static fn (): bool => $ignored->isComplete() && $cancelled->isComplete());
            unset($awaited, $cancelled, $fine);
            self::assertSame([], $log);
            unset($ignored);
            self::assertCount(1, $log);
            self::assertStringStartsWith('peregrine: a Future failed and nobody awaited it (outside any request): Uncaught DomainException: nobody saw me in ' . __FILE__, $log[0]);
        } finally {
            $loop->setWarn($saved);
        }
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

    /**
     * A plain Fiber of a task that waits runs the loop inside it: the fibers scheduled in the same
     * tick after that task run there too, rather than wait behind it (here one of them completes
     * what the plain Fiber waits for).
     */
    public function testAWaitInAPlainFiberRunsTheFibersScheduledBesideIt(): void
    {
        $gate = new Future();
        $waiter = async(static function () use ($gate): string {
            $plain = new \Fiber(static fn (): string => await($gate));
            $plain->start();

            return $plain->getReturn();
        });
        $opener = async(static function () use ($gate): void {
            $gate->resolve('opened');
        });
        self::assertSame('opened', await($waiter, 5));
        await($opener);
    }

    /**
     * A wait outside the loop's fibers (the main script, a plain Fiber) that is over once the
     * deferred callbacks of a tick ran returns then, without the tick waiting for the next timer
     * first (30 s away here).
     */
    public function testAWaitThatEndsInATickDoesNotWaitForTheNextTimer(): void
    {
        $loop = Loop::get();
        $fired = false;
        $timer = $loop->delay(30, static function () use (&$fired): void {
            $fired = true;
        });
        try {
            self::assertSame(1, await(async(static fn (): int => 1)));
            $plain = new \Fiber(static fn (): int => await(async(static fn (): int => 2)));
            $plain->start();
            self::assertSame(2, $plain->getReturn());
            self::assertFalse($fired);
        } finally {
            $loop->cancel($timer);
        }
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
