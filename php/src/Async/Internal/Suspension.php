<?php

declare(strict_types=1);

namespace Peregrine\Async\Internal;

/**
 * Suspension is one wait: suspend() returns the value given to resume() or throws what was
 * given to throw(), whichever comes first; later calls are ignored.
 *
 * In a fiber the loop runs (a Task), suspend() suspends that fiber and the loop resumes it. Anywhere
 * else (the main script, a user's own Fiber) it runs the loop until the wait is over, so plain
 * Fibers keep their own suspend/resume protocol.
 *
 *     new --suspend()--> waiting --resume()/throw()--> settled: the fiber is resumed from the loop
 *       \--resume()/throw()-------------------------> settled: suspend() returns at once
 *
 * @internal
 */
final class Suspension
{
    private bool $settled = false;
    private bool $waiting = false;
    private mixed $value = null;
    private ?\Throwable $error = null;

    /** @var list<\Closure(): void> */
    private array $cleanups = [];

    /**
     * @param ?\Fiber $fiber the loop's fiber that waits, or null: the wait runs the loop
     * @param ?Task   $task  the task of $fiber; or, for a wait that runs the loop inside a
     *                       plain Fiber of a task, that task, whose cancellation ends the wait
     */
    public function __construct(
        private readonly Loop $loop,
        private readonly ?\Fiber $fiber,
        private readonly ?Task $task,
    ) {
    }

    /** Whether the wait is not over yet: resume() or throw() would end it. */
    public function pending(): bool
    {
        return !$this->settled;
    }

    /**
     * Runs $cleanup when the wait is over, however it ends (the watchers and timers the waiter
     * registered).
     *
     * @param \Closure(): void $cleanup
     */
    public function onSettle(\Closure $cleanup): void
    {
        $this->cleanups[] = $cleanup;
    }

    public function resume(mixed $value = null): void
    {
        $this->settle(null, $value);
    }

    public function throw(\Throwable $e): void
    {
        $this->settle($e, null);
    }

    /**
     * Waits until resume() or throw().
     *
     * @throws \Throwable what throw() was given
     */
    public function suspend(): mixed
    {
        $this->takeCancellation();
        if (!$this->settled) {
            $this->waiting = true;
            if ($this->fiber !== null) {
                $this->task->waiting = $this;
                \Fiber::suspend();
                $this->task->waiting = null;
            } else {
                $settled = fn (): bool => $this->settled; // a tick that settled it does not wait on
                while (!$this->settled) {
                    if (!$this->loop->tick($settled)) {
                        $this->settle(new \LogicException('Deadlock: waiting for something that nothing can complete (no timer, no stream, no fiber)'), null);
                    }
                    $this->takeCancellation(); // a CANCEL read by this loop, for the task it runs in
                }
            }
        }
        if ($this->error !== null) {
            throw $this->error;
        }

        return $this->value;
    }

    /** Ends the wait with the task's cancellation, if one came. */
    private function takeCancellation(): void
    {
        if ($this->task !== null && $this->task->cancelled !== null && !$this->settled) {
            $e = $this->task->cancelled;
            $this->task->cancelled = null;
            $this->settle($e, null);
        }
    }

    private function settle(?\Throwable $error, mixed $value): void
    {
        if ($this->settled) {
            return;
        }
        $this->settled = true;
        $this->error = $error;
        $this->value = $value;
        $cleanups = $this->cleanups;
        $this->cleanups = [];
        foreach ($cleanups as $cleanup) {
            $cleanup();
        }
        if ($this->waiting && $this->fiber !== null) {
            $this->loop->schedule($this->fiber);
        }
    }
}
