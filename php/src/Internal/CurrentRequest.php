<?php

declare(strict_types=1);

namespace Peregrine\Internal;

/**
 * CurrentRequest tells code outside the Worker's loop which request the worker is answering,
 * under the cli runtime, so that Peregrine\Http\earlyHints() can send a HINTS frame for it.
 * Worker sets it for each request and clears it once the answer begins: after the RESPONSE frame
 * the protocol allows no more hints.
 *
 * @internal
 */
final class CurrentRequest
{
    /** Where frames go; set when the Worker's loop starts. */
    public static ?Connection $connection = null;

    /** The request whose answer has not begun yet; 0 when there is none. */
    public static int $id = 0;

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
        if (self::$id === 0 || self::$connection === null || $headers === []) {
            return false;
        }
        self::$connection->send(Frame::hints(self::$id, $headers));

        return true;
    }
}
