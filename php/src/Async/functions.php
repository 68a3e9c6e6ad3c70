<?php

declare(strict_types=1);

namespace Peregrine\Async;

use Peregrine\Async\Internal\Loop;

/**
 * Runs $work(...$args) in a Fiber of its own and returns its Future at once. The work starts at
 * the next switch (the caller's next wait) and runs until it waits in its turn.
 *
 * @template T
 *
 * @param \Closure(mixed...): T $work
 *
 * @return Future<T>
 */
function async(\Closure $work, mixed ...$args): Future
{
    return Loop::get()->spawn($args === [] ? $work : static fn (): mixed => $work(...$args));
}

/**
 * Waits for $future (or an Amp v2 promise: Amp's loop then runs on this one) and returns its
 * value, or throws what it failed with. Inside a request (or
 * an async() fiber) only this fiber waits; elsewhere the loop runs until the future completes.
 *
 * With a $timeout in seconds, a future still pending then is cancelled (its fiber gets a
 * TimeoutException where it waits) and await() throws the TimeoutException.
 *
 * @throws TimeoutException   after $timeout
 * @throws CancelledException if this fiber is cancelled meanwhile (its request's deadline)
 */
function await(Future|\Amp\Promise $future, ?float $timeout = null): mixed
{
    if (!$future instanceof Future) {
        Internal\Amp::install(Loop::get());
        $future = Internal\Amp::future($future);
    }
    if ($future->isComplete()) {
        return $future->result();
    }
    $loop = Loop::get();
    $suspension = $loop->suspension();
    $id = $future->subscribe(static function (?\Throwable $error, mixed $value) use ($suspension): void {
        $error === null ? $suspension->resume($value) : $suspension->throw($error);
    });
    $suspension->onSettle(static fn () => $future->unsubscribe($id));
    if ($timeout !== null) {
        $timer = $loop->delay($timeout, static function () use ($future, $suspension, $timeout): void {
            $e = new TimeoutException(sprintf('Timed out after %s s', $timeout));
            $suspension->throw($e);
            $future->cancel($e);
        });
        $suspension->onSettle(static fn () => $loop->cancel($timer));
    }
    $suspension->suspend();

    return $future->result();
}

/**
 * Waits for every future and returns their values with the same keys. The first failure is
 * thrown once every future has completed (none is left running behind the caller's back).
 *
 * @param iterable<array-key, Future|\Amp\Promise> $futures
 *
 * @return array<array-key, mixed>
 */
function awaitAll(iterable $futures, ?float $timeout = null): array
{
    $futures = \is_array($futures) ? $futures : iterator_to_array($futures);
    $deadline = $timeout === null ? null : Loop::now() + $timeout;
    $values = [];
    $first = null;
    foreach ($futures as $key => $future) {
        try {
            $left = $deadline === null ? null : max(0.0, $deadline - Loop::now());
            $values[$key] = await($future, $left);
        } catch (TimeoutException $e) {
            foreach ($futures as $f) {
                $f->cancel($e);
            }
            throw $e;
        } catch (\Throwable $e) {
            $first ??= $e;
        }
    }
    if ($first !== null) {
        throw $first;
    }

    return $values;
}

/**
 * Waits $seconds. Inside a request only this fiber waits: the worker serves others meanwhile.
 *
 * @throws CancelledException if this fiber is cancelled meanwhile
 */
function delay(float $seconds): void
{
    $loop = Loop::get();
    $suspension = $loop->suspension();
    $timer = $loop->delay($seconds, static fn () => $suspension->resume());
    $suspension->onSettle(static fn () => $loop->cancel($timer));
    $suspension->suspend();
}
