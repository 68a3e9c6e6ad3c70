<?php

declare(strict_types=1);

namespace Peregrine\Async\Internal;

use Peregrine\Async\CancelledException;
use Peregrine\Async\Future;
use Peregrine\Internal\Handling;

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

    /** The task of the fiber enter() switched into and has not come back from. */
    private ?Task $running = null;

    /** @var \Closure(string): void */
    private \Closure $warn;

    /** @var ?\Closure(int): void told, at every switch, the request whose code runs now (0: none) */
    private ?\Closure $onSwitch = null;

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

    /**
     * Calls $callback with the id of the request whose fiber the loop switches into, before it
     * runs, and with the id of the one it comes back to (0 for none) after; null stops it. The
     * native runtime makes PHP's header state the request's there (Server).
     *
     * @param ?\Closure(int): void $callback
     */
    public function onSwitch(?\Closure $callback): void
    {
        $this->onSwitch = $callback;
    }

    /**
     * Logs the failure of a Future nobody awaited (Future::__destruct()), with the request it
     * worked for.
     *
     * @internal
     */
    public function unobserved(\Throwable $e, string $label): void
    {
        ($this->warn)(sprintf('peregrine: a Future failed and nobody awaited it (%s): %s',
            $label === '' ? 'outside any request' : 'request ' . $label, strtr(Handling::describe($e), ["\r\n" => ' ', "\n" => ' ', "\r" => ' '])));
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
        $future->label($task->label);
        // A new Fiber for every work, never one whose work ended: what a library keeps per fiber
        // (a WeakMap keyed by Fiber::getCurrent(): a context, the current user) must not reach
        // the next request.
        $fiber = new \Fiber(self::runJob(...));
        $this->tasks[$fiber] = $task;
        $future->onCancel(function (CancelledException $e) use ($fiber): void {
            $this->cancelTask($fiber, $e);
        });
        $this->schedule($fiber);

        return $future;
    }

    /**
     * The body of every fiber spawn() makes: runs its task's job and completes the Future. A task
     * cancelled before its fiber started never runs its job (a request cancelled before it began
     * ends without an answer).
     */
    private static function runJob(): void
    {
        $loop = self::get();
        $task = $loop->tasks[\Fiber::getCurrent()];
        [$work, $future] = $task->job;
        $task->job = null;
        if ($task->cancelled !== null) {
            $e = $task->cancelled;
            $task->cancelled = null;
            $future->fail($e);

            return;
        }
        try {
            $future->resolve($work());
        } catch (\Throwable $e) {
            $future->fail($e);
        }
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
        if ($task === null) {
            // The loop runs until the wait is over; inside a plain Fiber of a task, a
            // cancellation of that task ends the wait.
            return new Suspension($this, null, $fiber === null ? null : $this->running);
        }

        return new Suspension($this, $fiber, $task);
    }

    /**
     * Cancels a task, whatever state its fiber is in:
     *
     *     not started            its job never runs; its Future fails with $e
     *     waiting                $e is thrown where it waits
     *     woken, not resumed     its wait ended (the value it waited for is kept): $e is thrown
     *                            at its next wait
     *     running                $e is thrown at its next wait (also a wait inside a plain
     *                            Fiber it runs)
     *     ended                  nothing: its Future holds its result
     */
    public function cancelTask(\Fiber $fiber, CancelledException $e): void
    {
        $task = $this->tasks[$fiber] ?? null;
        if ($task === null || $fiber->isTerminated()) {
            return;
        }
        // A wait that was settled already (its fiber is scheduled but not yet resumed) ignores
        // throw(): the cancellation would be lost, and the request run on past its CANCEL.
        if ($task->waiting !== null && $task->waiting->pending()) {
            $task->waiting->throw($e);
        } else {
            $task->cancelled ??= $e;
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
        while (($until === null || !$until()) && $this->tick($until)) {
            // one tick at a time
        }
    }

    /**
     * Runs one tick. Returns false, having done nothing, when there is nothing to run or wait for.
     * Once $until returns true (checked after the deferred callbacks ran: what the caller waits
     * for came), the tick does not wait: ready streams and due timers only.
     */
    public function tick(?\Closure $until = null): bool
    {
        if ($this->deferred === [] && $this->timers === [] && $this->readers === [] && $this->writers === []) {
            return false;
        }
        $this->runDeferred();
        foreach ($this->beforeWait as $callback) {
            $callback();
        }
        $timeout = $this->deferred !== [] || ($until !== null && $until()) ? 0.0 : $this->nextTimeout();
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

    /**
     * Runs the callbacks deferred before this tick (those deferred meanwhile wait for the next).
     * Each leaves the queue as it runs, so that a loop run inside one of them (a plain Fiber of a
     * task waiting) runs the rest instead of waiting behind it.
     */
    private function runDeferred(): void
    {
        $last = array_key_last($this->deferred);
        foreach ($this->deferred as $key => $callback) { // a snapshot: a nested tick may take some
            if ($key > $last) {
                break;
            }
            if (isset($this->deferred[$key])) {
                unset($this->deferred[$key]);
                $callback();
            }
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
        $this->onSwitch?->__invoke($this->running?->request ?? 0);
        try {
            if ($fiber->isStarted()) {
                $fiber->resume();
            } else {
                $fiber->start();
            }
        } finally {
            $this->running = $outer;
            $this->onSwitch?->__invoke($outer?->request ?? 0);
        }
        $held = (hrtime(true) - $start) / 1e9;
        if ($held > self::BLOCK_WARNING) {
            $label = $this->tasks[$fiber]->label ?? '';
            ($this->warn)(sprintf('peregrine: %s kept the worker from switching to other requests for %d ms (blocking code in a concurrent worker: docs/concurrency.md)',
                $label === '' ? 'a fiber' : 'request ' . $label, (int) ($held * 1000)));
        }
    }
}
