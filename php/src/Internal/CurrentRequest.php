<?php

declare(strict_types=1);

namespace Peregrine\Internal;

use Peregrine\Async\Internal\Loop;

/**
 * CurrentRequest tells code outside the Worker's loop which request the worker is answering,
 * wherever the PHP library writes the frames (the cli runtime, and concurrent workers on both
 * runtimes), so that Peregrine\Http\earlyHints() can send a HINTS frame for it. After the
 * RESPONSE frame the protocol allows no more hints, so a request is current only until its answer
 * begins:
 *
 * - one request at a time: Worker sets $id for each request and clears it once the answer begins;
 * - concurrently (workers.concurrency > 1): each request in flight is open from the start of its
 *   fiber until its answer begins, and the current one is the one whose fiber (or an async()
 *   fiber of it) the loop is running.
 *
 * @internal
 */
final class CurrentRequest
{
    /** Where frames go; set when the Worker's loop starts. */
    public static ?Connection $connection = null;

    /** The request whose answer has not begun yet, one request at a time; 0 when there is none. */
    public static int $id = 0;

    /** @var array<int, true> requests in flight under concurrency whose answer has not begun */
    private static array $open = [];

    /** A concurrent request's fiber starts: hints may go for it until answering($id). */
    public static function opened(int $id): void
    {
        self::$open[$id] = true;
    }

    /** Request $id's answer begins, or the request ended: no hints for it any more. */
    public static function answering(int $id): void
    {
        unset(self::$open[$id]);
        if (self::$id === $id) {
            self::$id = 0;
        }
    }

    /**
     * Sends a HINTS frame (103 Early Hints) for the current request; false when there is no
     * request whose answer has not begun, or no header to send.
     *
     * @param array<string|int, mixed> $headers
     *
     * @throws \InvalidArgumentException if a header cannot be carried by the protocol
     * @throws ProtocolError             if the server's pipe is gone
     */
    public static function hints(array $headers): bool
    {
        $id = self::$id !== 0 ? self::$id : self::ofRunningFiber();
        if ($id === 0 || self::$connection === null || $headers === []) {
            return false;
        }
        self::$connection->send(Frame::hints($id, $headers));

        return true;
    }

    /** Under concurrency, the open request the running fiber works for; 0 when there is none. */
    private static function ofRunningFiber(): int
    {
        if (self::$open === []) {
            return 0;
        }
        $id = Loop::get()->running()?->request ?? 0;

        return isset(self::$open[$id]) ? $id : 0;
    }
}
