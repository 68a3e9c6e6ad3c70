<?php

declare(strict_types=1);

namespace Peregrine\Async;

use Peregrine\Async\Internal\Loop;

/**
 * Future is the result of an operation that runs concurrently: async() returns one, await()
 * waits for it. A Future completes once, with a value or a Throwable; what completes it later is
 * ignored.
 *
 * cancel() cancels the operation: the fiber that computes it (async()'s) gets a
 * CancelledException at the point where it waits, its finally blocks run, and the Future fails
 * with that exception. A fiber that is running (not waiting) is cancelled at its next wait.
 *
 * A Future that failed and is dropped without anyone having asked for its result (await(), or
 * a callback) is logged with what it threw and the request it worked for: a failure is never
 * lost silently. A cancellation is not logged.
 */
final class Future
{
    private bool $complete = false;
    private mixed $value = null;
    private ?\Throwable $error = null;
    private bool $observed = false;

    /** @var array<int, \Closure(?\Throwable, mixed): void> */
    private array $callbacks = [];
    private int $nextCallback = 0;

    /** @var ?\Closure(CancelledException): void */
    private ?\Closure $canceller = null;

    /** The path of the request the operation worked for, for the log of a failure nobody saw. */
    private string $label = '';

    /** A future that has completed with $value already. */
    public static function complete(mixed $value = null): self
    {
        $f = new self();
        $f->resolve($value);

        return $f;
    }

    /** A future that has failed with $e already. */
    public static function error(\Throwable $e): self
    {
        $f = new self();
        $f->fail($e);

        return $f;
    }

    public function isComplete(): bool
    {
        return $this->complete;
    }

    /** Waits for the result; see Peregrine\Async\await(). */
    public function await(?float $timeout = null): mixed
    {
        return await($this, $timeout);
    }

    /**
     * Cancels the operation behind this future (a no-op once it is complete). The future fails
     * with $reason (a CancelledException by default) once the operation has unwound.
     */
    public function cancel(?CancelledException $reason = null): void
    {
        if ($this->complete) {
            return;
        }
        $reason ??= new CancelledException('The operation was cancelled');
        if ($this->canceller !== null) {
            ($this->canceller)($reason);

            return;
        }
        $this->fail($reason);
    }

    /**
     * Completes the future with $value.
     *
     * @internal
     */
    public function resolve(mixed $value): void
    {
        if ($this->complete) {
            return;
        }
        if ($value instanceof self) {
            throw new \InvalidArgumentException('A Future cannot complete with a Future; await it first');
        }
        $this->complete = true;
        $this->value = $value;
        $this->notify();
    }

    /**
     * Fails the future with $e.
     *
     * @internal
     */
    public function fail(\Throwable $e): void
    {
        if ($this->complete) {
            return;
        }
        $this->complete = true;
        $this->error = $e;
        $this->notify();
    }

    /**
     * Calls $callback(?Throwable $error, mixed $value) once the future completes, from the loop
     * (never from inside resolve()). Returns an id for unsubscribe().
     *
     * @internal
     *
     * @param \Closure(?\Throwable, mixed): void $callback
     */
    public function subscribe(\Closure $callback): int
    {
        $this->observed = true;
        $id = $this->nextCallback++;
        if ($this->complete) {
            Loop::get()->defer(fn () => $callback($this->error, $this->value));

            return $id;
        }
        $this->callbacks[$id] = $callback;

        return $id;
    }

    /** @internal */
    public function unsubscribe(int $id): void
    {
        unset($this->callbacks[$id]);
    }

    /**
     * What cancel() does while the operation runs (async() stops its fiber).
     *
     * @internal
     *
     * @param \Closure(CancelledException): void $canceller
     */
    public function onCancel(\Closure $canceller): void
    {
        $this->canceller = $canceller;
    }

    /**
     * The value, or the Throwable thrown; only once complete.
     *
     * @internal
     */
    public function result(): mixed
    {
        $this->observed = true;
        if ($this->error !== null) {
            throw $this->error;
        }

        return $this->value;
    }

    /**
     * Whether someone asked for the result: a failure nobody awaits is logged.
     *
     * @internal
     */
    public function observed(): bool
    {
        return $this->observed;
    }

    /**
     * Names the request the operation works for (its path), for the log of a failure nobody saw.
     *
     * @internal
     */
    public function label(string $label): void
    {
        $this->label = $label;
    }

    public function __destruct()
    {
        if ($this->error !== null && !$this->observed && !$this->error instanceof CancelledException) {
            Loop::get()->unobserved($this->error, $this->label);
        }
    }

    private function notify(): void
    {
        $this->canceller = null;
        $callbacks = $this->callbacks;
        $this->callbacks = [];
        if ($callbacks === []) {
            return;
        }
        $loop = Loop::get();
        foreach ($callbacks as $callback) {
            $loop->defer(fn () => $callback($this->error, $this->value));
        }
    }
}
