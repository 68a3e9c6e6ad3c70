<?php

declare(strict_types=1);

namespace Peregrine;

use Peregrine\Internal\CallSocket;

/**
 * WebSocket reaches the connections the servers hold, from any request, job or event
 * (docs/websocket.md). Each call is carried out at once, through the server's call socket.
 * Delivery is at most once: a connection that is gone, or whose client does not read, misses
 * it, and across servers the broker keeps nothing.
 */
final class WebSocket
{
    /** Sends $data to the connection $connectionId, whichever server holds it; a gone one is no error. */
    public static function send(string $connectionId, string $data, bool $binary = false): void
    {
        CallSocket::call(['op' => 'ws.send', 'connection' => $connectionId, 'binary' => $binary] + self::data($data, $binary));
    }

    /** Sends $data to every connection that joined $channel, on every server of the broker. */
    public static function publish(string $channel, string $data): void
    {
        CallSocket::call(['op' => 'ws.publish', 'channel' => $channel] + self::data($data, false));
    }

    /** Closes the connection $connectionId with $code, whichever server holds it. */
    public static function close(string $connectionId, int $code = 1000): void
    {
        CallSocket::call(['op' => 'ws.close', 'connection' => $connectionId, 'code' => $code]);
    }

    /**
     * JSON carries UTF-8 text only: anything else goes in base64.
     *
     * @return array<string, string>
     */
    private static function data(string $data, bool $binary): array
    {
        return $binary || !(preg_match('//u', $data) === 1) ? ['data64' => base64_encode($data)] : ['data' => $data];
    }
}
