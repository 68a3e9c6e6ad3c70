<?php

declare(strict_types=1);

namespace Peregrine\Tests;

use Peregrine\Async\CancelledException;
use Peregrine\Async\Future;
use Peregrine\Async\Pool;
use Peregrine\Async\TimeoutException;
use PHPUnit\Framework\TestCase;

use function Peregrine\Async\async;
use function Peregrine\Async\await;
use function Peregrine\Async\awaitAll;
use function Peregrine\Async\delay;

/** Peregrine\Async\Pool on the loop, with plain objects as connections. */
final class PoolTest extends TestCase
{
    /** @return array{Pool<\stdClass>, \ArrayObject<int, \stdClass>} a pool and the connections it made */
    private static function pool(int $size): array
    {
        $made = new \ArrayObject();
        $pool = new Pool(static function () use ($made): \stdClass {
            delay(0.001); // a connect waits, as a real one does
            $c = new \stdClass();
            $c->id = \count($made) + 1;
            $made[] = $c;

            return $c;
        }, $size);

        return [$pool, $made];
    }

    /** 60 fibers at once on a pool of 4: never more than 4 made or lent, every work done. */
    public function testFibersWaitWhenEveryConnectionIsLent(): void
    {
        [$pool, $made] = self::pool(4);
        $peak = 0;
        $users = [];
        $futures = [];
        for ($i = 0; $i < 60; ++$i) {
            $futures[] = async(static function () use ($pool, &$peak, &$users, $i): int {
                return $pool->use(static function (\stdClass $c) use ($pool, &$peak, &$users, $i): int {
                    self::assertArrayNotHasKey($c->id, $users, 'a connection lent to two fibers at once');
                    $users[$c->id] = $i;
                    $peak = max($peak, $pool->lent());
                    delay(0.001 * ($i % 3));
                    unset($users[$c->id]);

                    return $i;
                });
            });
        }
        self::assertSame(range(0, 59), awaitAll($futures));
        self::assertCount(4, $made);
        self::assertSame(4, $peak);
        self::assertSame([4, 0], [$pool->connections(), $pool->lent()]);
    }

    /** A connection released goes to the fiber that has waited longest. */
    public function testWaitersAreServedInTheOrderTheyCame(): void
    {
        [$pool] = self::pool(1);
        $first = $pool->acquire();
        $order = [];
        $futures = [];
        foreach (['a', 'b', 'c'] as $name) {
            $futures[] = async(static function () use ($pool, $name, &$order): void {
                $c = $pool->acquire();
                $order[] = $name;
                delay(0.001);
                $pool->release($c);
            });
        }
        delay(0.005); // all three wait
        self::assertSame([], $order);
        $pool->release($first);
        awaitAll($futures);
        self::assertSame(['a', 'b', 'c'], $order);
    }

    public function testAcquireTimesOutAndTheWaitIsForgotten(): void
    {
        [$pool] = self::pool(1);
        $held = $pool->acquire();
        try {
            $pool->acquire(0.01);
            self::fail('acquire() returned');
        } catch (TimeoutException $e) {
            self::assertStringContainsString('No connection of the pool was free within 0.01 s', $e->getMessage());
        }
        $pool->release($held);
        self::assertSame($held, $pool->acquire(0.01), 'the idle connection, not a new one');
    }

    /**
     * A fiber cancelled while it waits leaves the queue; the connection goes to the next. A work
     * cancelled midway drops its connection (its protocol may have stopped midway) and a waiter
     * makes a new one.
     */
    public function testCancellationWhileWaitingAndWhileWorking(): void
    {
        [$pool, $made] = self::pool(1);
        $working = async(static fn () => $pool->use(static fn (\stdClass $c) => delay(10)));
        $waiting = async(static fn () => $pool->use(static fn (\stdClass $c): int => $c->id));
        $next = async(static fn () => $pool->use(static fn (\stdClass $c): int => $c->id));
        delay(0.005);
        $waiting->cancel();
        $working->cancel();
        self::assertSame(2, await($next), 'the cancelled work dropped connection 1: a new one was made');
        self::assertCancelledAndOneLeft($pool, $made, $working, $waiting);
    }

    /**
     * A fiber handed a connection and cancelled before it resumed still gets it (the cancel
     * comes at its next wait, in its work): the connection is dropped there, not lost, and the
     * next waiter is served.
     */
    public function testAWaiterCancelledAsItIsHandedAConnectionLosesNothing(): void
    {
        [$pool, $made] = self::pool(1);
        $held = $pool->acquire();
        $handed = async(static fn () => $pool->use(static fn (\stdClass $c) => delay(10)));
        $next = async(static fn () => $pool->use(static fn (\stdClass $c): int => $c->id));
        delay(0.005);
        $pool->release($held); // $handed is woken with it, not yet resumed
        $handed->cancel();
        self::assertSame(2, await($next, 5));
        self::assertCancelledAndOneLeft($pool, $made, $handed);
    }

    /**
     * Each future failed with a cancellation; the pool made two connections, dropped one, and
     * lends none.
     *
     * @param Pool<\stdClass>                 $pool
     * @param \ArrayObject<int, \stdClass> $made
     */
    private static function assertCancelledAndOneLeft(Pool $pool, \ArrayObject $made, Future ...$futures): void
    {
        foreach ($futures as $f) {
            try {
                await($f);
                self::fail('a cancelled use() returned');
            } catch (CancelledException) {
            }
        }
        self::assertCount(2, $made);
        self::assertSame([1, 0], [$pool->connections(), $pool->lent()]);
    }

    /** A failure of the work (not a cancellation) keeps the connection; it is lent again. */
    public function testAFailingWorkKeepsItsConnection(): void
    {
        [$pool, $made] = self::pool(2);
        try {
            $pool->use(static fn (\stdClass $c): never => throw new \DomainException('duplicate key'));
            self::fail('use() returned');
        } catch (\DomainException) {
        }
        self::assertSame(1, $pool->use(static fn (\stdClass $c): int => $c->id));
        self::assertCount(1, $made);
    }

    /** A connect that fails frees its place: the waiters are not stuck behind it. */
    public function testAFailedConnectFreesItsPlace(): void
    {
        $attempts = 0;
        $pool = new Pool(static function () use (&$attempts): \stdClass {
            delay(0.001);
            if (++$attempts === 1) {
                throw new \RuntimeException('connection refused');
            }

            return new \stdClass();
        }, 1);
        $failing = async(static fn () => $pool->use(static fn (\stdClass $c): string => 'first'));
        $after = async(static fn () => $pool->use(static fn (\stdClass $c): string => 'second'));
        self::assertSame('second', await($after, 5));
        $this->expectExceptionMessage('connection refused');
        await($failing);
    }

    public function testMisuseIsRefused(): void
    {
        [$pool] = self::pool(1);
        $c = $pool->acquire();
        $pool->release($c);
        try {
            $pool->release($c);
            self::fail('a second release() passed');
        } catch (\LogicException $e) {
            self::assertStringContainsString('released twice, or never acquired', $e->getMessage());
        }
        try {
            new Pool(static fn (): \stdClass => new \stdClass(), 0);
            self::fail('a pool of 0 was made');
        } catch (\ValueError) {
        }
        $bad = new Pool(static fn (): string => 'not an object', 1);
        try {
            $bad->acquire();
            self::fail('acquire() returned');
        } catch (\UnexpectedValueException) {
        }
        self::assertSame(0, $bad->connections());
    }

    /** Rounds of 20 fibers on 3 connections: the same 3 are lent again and again. */
    public function testManyRoundsLeaveNothingBehind(): void
    {
        [$pool, $made] = self::pool(3);
        for ($round = 0; $round < 5; ++$round) {
            awaitAll(array_map(static fn (int $i): Future => async(static fn () => $pool->use(static function (\stdClass $c) use ($i): void {
                delay(0.0005 * ($i % 2));
            })), range(1, 20)));
        }
        self::assertCount(3, $made);
        self::assertSame([3, 0], [$pool->connections(), $pool->lent()]);
    }
}
