<?php

declare(strict_types=1);

namespace Peregrine\Async\Internal;

/**
 * Hooks is what the native runtime's hooks (native/async.c) call when a request's fiber would
 * block: sleep(), usleep() and time_nanosleep(), a read, write, connect or accept on a socket
 * stream that is not ready, and poll() (libpq, libcurl, TLS). wait() and waitAny() suspend the
 * fiber until a stream is ready or the time is up, and the C code then does what it would have
 * done.
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
        return match ($mode) {
            self::READ => self::waitAny([$stream], [], $timeout),
            self::WRITE => self::waitAny([], [$stream], $timeout),
            self::PROBE => self::hooked() ? self::READY : self::NOT_HOOKED,
            default => self::hooked() ? self::suspend([], [], $timeout, self::READY) : self::NOT_HOOKED,
        };
    }

    /**
     * Waits until one of $readers is readable or one of $writers writable (READY), or for
     * $timeout seconds (TIMED_OUT; negative: no timeout): poll() of several fds.
     *
     * @param list<resource> $readers
     * @param list<resource> $writers
     *
     * @throws \Peregrine\Async\CancelledException if the fiber is cancelled meanwhile
     */
    public static function waitAny(array $readers, array $writers, float $timeout): int
    {
        return self::hooked() ? self::suspend($readers, $writers, $timeout, self::TIMED_OUT) : self::NOT_HOOKED;
    }

    /** Whether a wait here suspends a fiber the loop runs. */
    private static function hooked(): bool
    {
        return self::$enabled && Loop::get()->task() !== null;
    }

    /**
     * @param list<resource> $readers
     * @param list<resource> $writers
     */
    private static function suspend(array $readers, array $writers, float $timeout, int $atTimeout): int
    {
        $loop = Loop::get();
        $suspension = $loop->suspension();
        $ready = static fn () => $suspension->resume(self::READY);
        $watchers = [];
        foreach ($readers as $stream) {
            $watchers[] = $loop->onReadable($stream, $ready);
        }
        foreach ($writers as $stream) {
            $watchers[] = $loop->onWritable($stream, $ready);
        }
        $suspension->onSettle(static function () use ($loop, $watchers): void {
            foreach ($watchers as $id) {
                $loop->cancel($id);
            }
        });
        if ($timeout >= 0) {
            $timer = $loop->delay($timeout, static fn () => $suspension->resume($atTimeout));
            $suspension->onSettle(static fn () => $loop->cancel($timer));
        }

        return (int) $suspension->suspend();
    }
}
