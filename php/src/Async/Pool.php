<?php

declare(strict_types=1);

namespace Peregrine\Async;

use Peregrine\Async\Internal\Loop;
use Peregrine\Async\Internal\Suspension;

/**
 * Pool lends connections (a PDO, a mysqli, a Redis client: any object) to the fibers of a
 * concurrent worker, one fiber at a time each, and makes at most $size of them: a worker of
 * concurrency 256 needs as many connections as it has queries in flight, not one per request.
 *
 *     $pool = new Pool(static fn (): PDO => new PDO($dsn, $user, $password), size: 10);
 *     $rows = $pool->use(static fn (PDO $db): array => $db->query('SELECT ...')->fetchAll());
 *
 * use() lends one for the time of a callable and takes it back however it ends; acquire() and
 * release() do the same in two calls. When all $size are lent, acquire() waits (only its fiber
 * waits; the worker serves others meanwhile) until one is released, first come first served, or
 * until its $timeout, when it throws a TimeoutException.
 *
 * A connection whose work was cancelled (the request's exec_timeout or its client left, a
 * CancelledException through use(), or release($c, reusable: false)) is dropped, not lent
 * again: its protocol may have stopped midway. What the work left on a connection it keeps (an
 * open transaction, a session variable): end it before releasing. The pool does not check an
 * idle connection's health; a query on one the server closed fails, as it would without a pool.
 *
 * @template T of object
 */
final class Pool
{
    /** @var list<T> connections made and released, ready to lend */
    private array $idle = [];

    /** Connections made and not dropped: lent, idle, or being made. */
    private int $made = 0;

    /** @var \WeakMap<T, true> the connections lent now */
    private \WeakMap $lent;

    /** @var array<int, Suspension> the fibers waiting for a connection, in the order they came */
    private array $waiting = [];
    private int $nextWaiter = 0;

    /**
     * @param \Closure(): T $connect makes a connection; what it throws, acquire() throws
     * @param int           $size    connections made at most
     *
     * @throws \ValueError if $size is below 1
     */
    public function __construct(private readonly \Closure $connect, private readonly int $size = 10)
    {
        if ($size < 1) {
            throw new \ValueError("A Pool needs a size of at least 1, $size given");
        }
        $this->lent = new \WeakMap();
    }

    /**
     * Lends a connection to $work for its duration, and returns what $work returns.
     *
     * @template R
     *
     * @param \Closure(T): R $work
     *
     * @return R
     *
     * @throws TimeoutException if no connection was free within $timeout seconds
     */
    public function use(\Closure $work, ?float $timeout = null): mixed
    {
        $connection = $this->acquire($timeout);
        $reusable = false;
        try {
            $result = $work($connection);
            $reusable = true;

            return $result;
        } catch (CancelledException $e) {
            throw $e; // dropped below: its protocol may have stopped midway
        } catch (\Throwable $e) {
            $reusable = true; // the connection reported the failure (a PDOException): it is usable

            throw $e;
        } finally {
            $this->release($connection, $reusable);
        }
    }

    /**
     * Lends a connection: an idle one, a new one while fewer than $size exist, or else the first
     * one released after this fiber's turn comes. Give it back with release().
     *
     * @return T
     *
     * @throws TimeoutException   if none was free within $timeout seconds
     * @throws CancelledException if this fiber is cancelled while it waits
     */
    public function acquire(?float $timeout = null): object
    {
        $deadline = $timeout === null ? null : Loop::now() + $timeout;
        while (true) {
            if ($this->idle !== [] && $this->waiting === []) {
                return $this->lend(array_pop($this->idle));
            }
            if ($this->made < $this->size && $this->waiting === []) {
                return $this->lend($this->make());
            }
            $connection = $this->wait($deadline, $timeout);
            if ($connection !== null) {
                return $this->lend($connection);
            }
            // A place was freed (a connection dropped): make one, unless others came first.
            if ($this->made < $this->size) {
                return $this->lend($this->make());
            }
        }
    }

    /**
     * Takes a connection back: the first fiber waiting gets it, else it waits idle. With
     * $reusable false it is dropped (closed when nothing else holds it), and a fiber waiting
     * makes a new one.
     *
     * @param T $connection
     *
     * @throws \LogicException if $connection is not lent by this pool (released twice, or never
     *                         acquired)
     */
    public function release(object $connection, bool $reusable = true): void
    {
        if (!isset($this->lent[$connection])) {
            throw new \LogicException(sprintf('This %s was not lent by this pool: released twice, or never acquired', $connection::class));
        }
        unset($this->lent[$connection]);
        if (!$reusable) {
            --$this->made;
            $this->handOver(null);

            return;
        }
        if (!$this->handOver($connection)) {
            $this->idle[] = $connection;
        }
    }

    /** Connections made and not dropped (lent, idle or being made); at most the pool's size. */
    public function connections(): int
    {
        return $this->made;
    }

    /** Connections lent now. */
    public function lent(): int
    {
        return \count($this->lent);
    }

    /**
     * @return T
     */
    private function make(): object
    {
        ++$this->made; // before connecting: a connect waits, and others must count it
        try {
            $connection = ($this->connect)();
        } catch (\Throwable $e) {
            --$this->made;
            $this->handOver(null);

            throw $e;
        }
        if (!\is_object($connection)) {
            --$this->made;
            $this->handOver(null);

            throw new \UnexpectedValueException('The connect callable of a Pool returned ' . get_debug_type($connection) . ', not an object');
        }

        return $connection;
    }

    /**
     * @param T $connection
     *
     * @return T
     */
    private function lend(object $connection): object
    {
        $this->lent[$connection] = true;

        return $connection;
    }

    /**
     * Waits for release() to hand this fiber a connection, or null: a place was freed.
     *
     * @return ?T
     */
    private function wait(?float $deadline, ?float $timeout): ?object
    {
        $loop = Loop::get();
        $suspension = $loop->suspension();
        $id = $this->nextWaiter++;
        $this->waiting[$id] = $suspension;
        $suspension->onSettle(function () use ($id): void {
            unset($this->waiting[$id]);
        });
        if ($deadline !== null) {
            $timer = $loop->delay(max(0.0, $deadline - Loop::now()), static function () use ($suspension, $timeout): void {
                $suspension->throw(new TimeoutException(sprintf('No connection of the pool was free within %s s', $timeout)));
            });
            $suspension->onSettle(static fn () => $loop->cancel($timer));
        }

        return $suspension->suspend();
    }

    /**
     * Gives $connection (or null: a place to make one) to the first fiber still waiting.
     * Returns false when no fiber waits.
     *
     * @param ?T $connection
     */
    private function handOver(?object $connection): bool
    {
        foreach ($this->waiting as $suspension) {
            if ($suspension->pending()) {
                $suspension->resume($connection); // its onSettle takes it off the list

                return true;
            }
        }

        return false;
    }
}
