<?php

declare(strict_types=1);

namespace Peregrine\Async\Internal;

use Amp\Coroutine;
use Amp\Loop\Driver;
use Amp\Loop\UnsupportedFeatureException;
use Amp\Loop\Watcher;
use Amp\Promise;

use function Amp\Promise\rethrow;

/**
 * AmpDriver runs Amp v2's event loop (Debian's php-amphp-amp) on Peregrine's: Amp's timers and
 * stream watchers become the Loop's, and Amp's own tick (its deferred callbacks, watchers to
 * activate) runs from the Loop whenever Amp has queued work. So Amp code (Amp\call(),
 * Amp\delay(), Loop::onReadable()) inside a request's fiber makes progress while the fiber waits
 * with await(), and Amp's Loop::run() (Promise\wait()) runs Peregrine's loop.
 *
 * Signals are not supported (UnsupportedFeatureException), as under Amp's NativeDriver without
 * ext-pcntl.
 *
 * @internal
 */
final class AmpDriver extends Driver
{
    /** @var array<string, int> Amp watcher id => Loop id */
    private array $ids = [];

    private bool $tickScheduled = false;
    private bool $once = false;

    /** Amp's own run() is on the stack (Promise\wait()): it ticks Amp itself. */
    private bool $outer = false;

    public function __construct(private readonly Loop $loop)
    {
    }

    public function defer(callable $callback, $data = null): string
    {
        $id = parent::defer($callback, $data);
        $this->schedule();

        return $id;
    }

    public function delay(int $delay, callable $callback, $data = null): string
    {
        $id = parent::delay($delay, $callback, $data);
        $this->schedule();

        return $id;
    }

    public function repeat(int $interval, callable $callback, $data = null): string
    {
        $id = parent::repeat($interval, $callback, $data);
        $this->schedule();

        return $id;
    }

    public function onReadable($stream, callable $callback, $data = null): string
    {
        $id = parent::onReadable($stream, $callback, $data);
        $this->schedule();

        return $id;
    }

    public function onWritable($stream, callable $callback, $data = null): string
    {
        $id = parent::onWritable($stream, $callback, $data);
        $this->schedule();

        return $id;
    }

    public function onSignal(int $signo, callable $callback, $data = null): string
    {
        throw new UnsupportedFeatureException('Signal watchers are not supported on Peregrine\'s loop');
    }

    public function enable(string $watcherId)
    {
        parent::enable($watcherId);
        $this->schedule();
    }

    public function run()
    {
        if ($this->once) {
            parent::run();

            return;
        }
        $this->outer = true;
        try {
            parent::run();
        } finally {
            $this->outer = false;
        }
    }

    public function getHandle()
    {
        return null;
    }

    protected function activate(array $watchers)
    {
        foreach ($watchers as $watcher) {
            $this->ids[$watcher->id] = match ($watcher->type) {
                Watcher::READABLE => $this->loop->onReadable($watcher->value, fn () => $this->invoke($watcher, true)),
                Watcher::WRITABLE => $this->loop->onWritable($watcher->value, fn () => $this->invoke($watcher, true)),
                Watcher::DELAY, Watcher::REPEAT => $this->timer($watcher),
                default => throw new \Error('Unknown watcher type ' . $watcher->type),
            };
        }
    }

    protected function deactivate(Watcher $watcher)
    {
        if (isset($this->ids[$watcher->id])) {
            $this->loop->cancel($this->ids[$watcher->id]);
            unset($this->ids[$watcher->id]);
        }
    }

    protected function dispatch(bool $blocking)
    {
        if ($this->once) {
            $this->stop(); // one Amp tick, from the Loop: its own waiting is the Loop's
            return;
        }
        $this->loop->tick(); // Amp's run(): Peregrine's loop does the waiting
    }

    private function timer(Watcher $watcher): int
    {
        $wait = max(0, $watcher->expiration - $this->now()) / 1000;

        return $this->loop->delay($wait, function () use ($watcher): void {
            unset($this->ids[$watcher->id]);
            if ($watcher->type === Watcher::DELAY) {
                $this->cancel($watcher->id);
            } else {
                $watcher->expiration = $this->now() + $watcher->value;
                $this->ids[$watcher->id] = $this->timer($watcher);
            }
            $this->invoke($watcher);
        });
    }

    /** Calls a watcher's callback as Amp's drivers do: (id, data), or (id, stream, data) for I/O. */
    private function invoke(Watcher $watcher, bool $io = false): void
    {
        try {
            $result = $io ? ($watcher->callback)($watcher->id, $watcher->value, $watcher->data) : ($watcher->callback)($watcher->id, $watcher->data);
            if ($result instanceof \Generator) {
                $result = new Coroutine($result);
            }
            if ($result instanceof Promise) {
                rethrow($result);
            }
        } catch (\Throwable $e) {
            $this->error($e);
        }
        $this->schedule();
    }

    /** Runs one Amp tick on the Loop's next tick (its deferred callbacks, its new watchers). */
    private function schedule(): void
    {
        if ($this->tickScheduled) {
            return;
        }
        $this->tickScheduled = true;
        $this->loop->defer(function (): void {
            $this->tickScheduled = false;
            if ($this->outer) {
                return; // Amp's run() ticks on as soon as this Loop tick is over
            }
            $this->once = true;
            try {
                $this->run();
            } finally {
                $this->once = false;
            }
        });
    }
}
