<?php

declare(strict_types=1);

namespace Peregrine\Async\Internal;

use Peregrine\Async\CancelledException;
use Peregrine\Async\Future;

/**
 * Loop is the worker's event loop: deferred callbacks, timers, and streams waited on with
 * stream_select(), and the fibers (Tasks) it runs and resumes. There is one per process (get()).
 *
 * One tick runs the callbacks deferred so far, waits for the first of the streams and the next
 * timer (not at all when callbacks are queued), then runs the callbacks of the timers that are
 * due and of the streams that are ready. A fiber is resumed only from a tick, never from inside
 * another fiber's code, so fibers never nest through the loop.
 *
 * Every switch into a fiber is timed: a fiber that keeps the loop for more than
 * BLOCK_WARNING seconds is reported (warn()), with its task's label.
 *
 * @internal
 */
final class Loop
{
    /** A fiber running longer than this without suspending is reported, in seconds. */
    public const BLOCK_WARNING = 0.1;

    private static ?self $instance = null;

    /** @var list<\Closure(): void> */
    private array $deferred = [];

    private \SplPriorityQueue $timerQueue;

    /** @var array<int, array{float, \Closure(): void}> id => [due, callback]; cancelled timers are absent */
    private array $timers = [];

    /** @var array<int, array{resource, \Closure(): void}> */
    private array $readers = [];

    /** @var array<int, array{resource, \Closure(): void}> */
    private array $writers = [];

    /** @var array<int, \Closure(): void> run in every tick after the deferred callbacks, before the wait */
    private array $beforeWait = [];

    private int $nextId = 1;

    /** @var \WeakMap<\Fiber, Task> */
    private \WeakMap $tasks;

    /**
     * Fibers kept for spawn() once their work ended, at most this many (as many as a worker of
     * concurrency 256 runs at once). A new fiber's stack costs an mmap, an mprotect and a
     * munmap, and its pages fault in again: a third of the worker's CPU for a request that only
     * waits.
     */
    private const IDLE_FIBERS = 256;

    /** @var list<\Fiber> fibers whose work ended, suspended until spawn() gives them more */
    private array $idle = [];

    /** The task of the fiber enter() switched into and has not come back from. */
    private ?Task $running = null;

    /** @var \Closure(string): void */
    private \Closure $warn;

    private function __construct()
    {
        $this->timerQueue = new \SplPriorityQueue();
        $this->timerQueue->setExtractFlags(\SplPriorityQueue::EXTR_DATA);
        $this->tasks = new \WeakMap();
        $this->warn = static function (string $line): void {
            file_put_contents('php://stderr', $line . "\n");
        };
    }

    public static function get(): self
    {
        return self::$instance ??= new self();
    }

    /**
     * Where warnings go (one line each); stderr, the server's log, by default.
     *
     * @param \Closure(string): void $warn
     */
    public function setWarn(\Closure $warn): void
    {
        $this->warn = $warn;
    }

    public static function now(): float
    {
        return hrtime(true) / 1e9;
    }

    /** Runs $callback on the next tick. */
    public function defer(\Closure $callback): void
    {
        $this->deferred[] = $callback;
    }

    /** Runs $callback once, $seconds from now. Returns an id for cancel(). */
    public function delay(float $seconds, \Closure $callback): int
    {
        $id = $this->nextId++;
        $due = self::now() + max(0.0, $seconds);
        $this->timers[$id] = [$due, $callback];
        $this->timerQueue->insert($id, [-$due, -$id]);

        return $id;
    }

    /**
     * Runs $callback whenever $stream is readable (or at its end, or closed), until cancel().
     *
     * @param resource $stream
     */
    public function onReadable(mixed $stream, \Closure $callback): int
    {
        $id = $this->nextId++;
        $this->readers[$id] = [$stream, $callback];

        return $id;
    }

    /**
     * Runs $callback whenever $stream is writable, until cancel().
     *
     * @param resource $stream
     */
    public function onWritable(mixed $stream, \Closure $callback): int
    {
        $id = $this->nextId++;
        $this->writers[$id] = [$stream, $callback];

        return $id;
    }

    /**
     * Runs $callback in every tick once the deferred callbacks (the fibers resumed) have run,
     * before the loop waits, until cancel(): what they produced can go out in one piece.
     */
    public function beforeWait(\Closure $callback): int
    {
        $id = $this->nextId++;
        $this->beforeWait[$id] = $callback;

        return $id;
    }

    /** Forgets a timer, a stream watcher or a beforeWait callback; an unknown id is ignored. */
    public function cancel(int $id): void
    {
        unset($this->timers[$id], $this->readers[$id], $this->writers[$id], $this->beforeWait[$id]);
    }

    /**
     * Runs $work in a fiber of its own, from the next tick; the Future completes with what it
     * returns or throws. Cancelling the Future cancels the fiber at its wait.
     *
     * @param string $label   what warnings name; by default the label of the task spawning it
     * @param int    $request the request it works for; by default that of the task spawning it
     */
    public function spawn(\Closure $work, ?string $label = null, ?int $request = null): Future
    {
        $future = new Future();
        $task = new Task($label ?? $this->running?->label ?? '', $request ?? $this->running?->request ?? 0);
        $task->job = [$work, $future];
        $fiber = array_pop($this->idle) ?? $this->newFiber();
        $this->tasks[$fiber] = $task;
        $future->onCancel(function (CancelledException $e) use ($fiber, $task): void {
            if (($this->tasks[$fiber] ?? null) === $task) { // not a later task of the same fiber
                $this->cancelTask($fiber, $e);
            }
        });
        $this->schedule($fiber);

        return $future;
    }

    /**
     * A fiber that runs the job of its task, then waits in $idle for spawn() to give it another
     * task, or ends when enough fibers wait already.
     */
    private function newFiber(): \Fiber
    {
        return new \Fiber(function (): void {
            $fiber = \Fiber::getCurrent();
            while (true) {
                $task = $this->tasks[$fiber];
                [$work, $future] = $task->job;
                $task->job = null;
                try {
                    $future->resolve($work());
                } catch (\Throwable $e) {
                    $future->fail($e);
                }
                unset($task, $work, $future, $e); // nothing of this job outlives it
                if (\count($this->idle) >= self::IDLE_FIBERS) {
                    return;
                }
                $this->idle[] = $fiber;
                \Fiber::suspend();
            }
        });
    }

    /** The Task of the running fiber, or null outside the loop's fibers. */
    public function task(): ?Task
    {
        $fiber = \Fiber::getCurrent();

        return $fiber === null ? null : ($this->tasks[$fiber] ?? null);
    }

    /**
     * The task the loop switched into last and has not come back from: the one running now, even
     * inside a plain Fiber it started; null in the main context. After a fatal error ended the
     * process inside a fiber (no PHP code ran on the way out), the task that was running then.
     */
    public function running(): ?Task
    {
        return $this->running;
    }

    /**
     * A wait for the code running now: its fiber is suspended if it is one of the loop's,
     * otherwise the loop runs until the wait is over.
     */
    public function suspension(): Suspension
    {
        $fiber = \Fiber::getCurrent();
        $task = $fiber === null ? null : ($this->tasks[$fiber] ?? null);

        return new Suspension($this, $task === null ? null : $fiber, $task);
    }

    /**
     * Cancels a task: $e is thrown where it waits, or at its next wait if it is running.
     * Nothing happens to a fiber that has ended.
     */
    public function cancelTask(\Fiber $fiber, CancelledException $e): void
    {
        $task = $this->tasks[$fiber] ?? null;
        if ($task === null || $fiber->isTerminated()) {
            return;
        }
        if ($task->waiting !== null) {
            $task->waiting->throw($e);
        } else {
            $task->cancelled = $e;
        }
    }

    /**
     * Starts or resumes $fiber on the next tick.
     *
     * @internal for Suspension
     */
    public function schedule(\Fiber $fiber): void
    {
        $this->deferred[] = function () use ($fiber): void {
            $this->enter($fiber);
        };
    }

    /** Runs ticks until nothing is left to wait for, or $until returns true. */
    public function run(?\Closure $until = null): void
    {
        while (($until === null || !$until()) && $this->tick()) {
            // one tick at a time
        }
    }

    /**
     * Runs one tick. Returns false, having done nothing, when there is nothing to run or wait for.
     */
    public function tick(): bool
    {
        if ($this->deferred === [] && $this->timers === [] && $this->readers === [] && $this->writers === []) {
            return false;
        }
        $this->runDeferred();
        foreach ($this->beforeWait as $callback) {
            $callback();
        }
        $timeout = $this->deferred !== [] ? 0.0 : $this->nextTimeout();
        if ($this->readers !== [] || $this->writers !== []) {
            $this->select($timeout);
        } elseif ($timeout === null) {
            return true; // the deferred callbacks were all there was
        } elseif ($timeout > 0) {
            usleep((int) ceil($timeout * 1e6));
        }
        $this->runTimers();

        return true;
    }

    private function runDeferred(): void
    {
        $queue = $this->deferred;
        $this->deferred = [];
        foreach ($queue as $callback) {
            $callback();
        }
    }

    /** Seconds until the next timer, or null without one. */
    private function nextTimeout(): ?float
    {
        while (!$this->timerQueue->isEmpty()) {
            $id = $this->timerQueue->top();
            if (!isset($this->timers[$id])) {
                $this->timerQueue->extract(); // cancelled

                continue;
            }

            return max(0.0, $this->timers[$id][0] - self::now());
        }

        return null;
    }

    private function runTimers(): void
    {
        $now = self::now();
        while (!$this->timerQueue->isEmpty()) {
            $id = $this->timerQueue->top();
            if (!isset($this->timers[$id])) {
                $this->timerQueue->extract();

                continue;
            }
            if ($this->timers[$id][0] > $now) {
                return;
            }
            $this->timerQueue->extract();
            $callback = $this->timers[$id][1];
            unset($this->timers[$id]);
            $callback();
        }
    }

    private function select(?float $timeout): void
    {
        $read = $write = $ready = [];
        foreach ($this->readers as $id => [$stream]) {
            if (\is_resource($stream)) {
                $read[$id] = $stream;
            } else {
                $ready[] = $id; // closed: its waiter learns it by trying
            }
        }
        foreach ($this->writers as $id => [$stream]) {
            if (\is_resource($stream)) {
                $write[$id] = $stream;
            } else {
                $ready[] = $id;
            }
        }
        if ($ready !== []) {
            $timeout = 0.0;
        }
        if ($read !== [] || $write !== []) {
            $except = null;
            $seconds = $timeout === null ? null : (int) $timeout;
            $micro = $timeout === null ? null : (int) (($timeout - (int) $timeout) * 1e6);
            // Silenced: a signal interrupts the wait (EINTR), which is no failure.
            if (@stream_select($read, $write, $except, $seconds, $micro) === false) {
                $read = $write = [];
            }
        }
        foreach ([...$ready, ...array_keys($read), ...array_keys($write)] as $id) {
            $callback = $this->readers[$id][1] ?? $this->writers[$id][1] ?? null;
            if ($callback !== null) {
                $callback();
            }
        }
    }

    /** Switches into $fiber until it suspends or ends, and reports a switch that took too long. */
    private function enter(\Fiber $fiber): void
    {
        if ($fiber->isTerminated()) {
            return;
        }
        $start = hrtime(true);
        $outer = $this->running; // a loop run inside a plain Fiber enters fibers from within one
        $this->running = $this->tasks[$fiber] ?? null;
        try {
            if ($fiber->isStarted()) {
                $fiber->resume();
            } else {
                $fiber->start();
            }
        } finally {
            $this->running = $outer;
        }
        $held = (hrtime(true) - $start) / 1e9;
        if ($held > self::BLOCK_WARNING) {
            $label = $this->tasks[$fiber]->label ?? '';
            ($this->warn)(sprintf('peregrine: %s kept the worker from switching to other requests for %d ms (blocking code in a concurrent worker: docs/concurrency.md)',
                $label === '' ? 'a fiber' : 'request ' . $label, (int) ($held * 1000)));
        }
    }
}
