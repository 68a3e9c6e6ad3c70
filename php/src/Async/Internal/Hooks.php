<?php

declare(strict_types=1);

namespace Peregrine\Async\Internal;

/**
 * Hooks is what the native runtime's hooks (native/async.c) call when a request's fiber would
 * block: sleep(), usleep() and time_nanosleep(), and a read, write, connect or accept on a
 * socket stream that is not ready. wait() suspends the fiber until the stream is ready or the
 * time is up, and the C code then does what it would have done.
 *
 * Only fibers the loop runs (requests, async()) are suspended; anywhere else wait() returns
 * NOT_HOOKED and the call blocks as PHP's own would.
 *
 * @internal
 */
final class Hooks
{
    public const NOT_HOOKED = -1;
    public const TIMED_OUT = 0;
    public const READY = 1;

    public const SLEEP = 0;
    public const READ = 1;
    public const WRITE = 2;
    /** Asks whether a wait would suspend: READY if so, NOT_HOOKED if not. */
    public const PROBE = 3;

    /** Whether the hooks suspend at all: a concurrent server turns them on. */
    public static bool $enabled = false;

    /**
     * Waits for $stream (READ or WRITE) or for $timeout seconds (SLEEP, or the stream's own
     * timeout; negative: none).
     *
     * @param resource|null $stream
     *
     * @throws \Peregrine\Async\CancelledException if the fiber is cancelled meanwhile
     */
    public static function wait(mixed $stream, int $mode, float $timeout): int
    {
        if (!self::$enabled) {
            return self::NOT_HOOKED;
        }
        $loop = Loop::get();
        if ($loop->task() === null) {
            return self::NOT_HOOKED;
        }
        if ($mode === self::PROBE) {
            return self::READY;
        }
        $suspension = $loop->suspension();
        if ($mode !== self::SLEEP) {
            $watch = $mode === self::READ ? $loop->onReadable(...) : $loop->onWritable(...);
            $id = $watch($stream, static fn () => $suspension->resume(self::READY));
            $suspension->onSettle(static fn () => $loop->cancel($id));
        }
        if ($timeout >= 0) {
            $timer = $loop->delay($timeout, static fn () => $suspension->resume($mode === self::SLEEP ? self::READY : self::TIMED_OUT));
            $suspension->onSettle(static fn () => $loop->cancel($timer));
        }

        return (int) $suspension->suspend();
    }
}
