<?php

declare(strict_types=1);

namespace Peregrine\Http;

/**
 * EventStream turns a response into a server-sent event stream held by the server
 * (docs/websocket.md, "Event streams"): return EventStream::subscribe(['news']) from a
 * handler and the server keeps the connection, writing each message published to those
 * channels (Peregrine\WebSocket::publish) as an event with an `id:` and `data:` lines. The
 * worker is free as soon as the handler returns. Worker mode only, and not in direct mode
 * (http.direct), where the worker answers the client itself and no server holds the stream.
 */
final class EventStream
{
    /**
     * A response that subscribes its client to $channels. With $lastEventId (the request's
     * Last-Event-ID header, which browsers send when they reconnect), the messages published
     * since that event come first, as far as this server still has them.
     *
     * @param list<string> $channels
     *
     * @throws \InvalidArgumentException for no channel, or a name a header cannot carry
     * @throws \LogicException in direct mode (http.direct)
     */
    public static function subscribe(array $channels, ?string $lastEventId = null): Response
    {
        if ((string) getenv('PEREGRINE_DIRECT') !== '') {
            throw new \LogicException('EventStream::subscribe() needs the server\'s front, which direct mode (http.direct) has not: '
                . 'the worker answers the client itself and nothing would hold the stream. Use a WebSocket, or turn http.direct off (docs/direct.md)');
        }
        if ($channels === []) {
            throw new \InvalidArgumentException('EventStream::subscribe() needs at least one channel');
        }
        foreach ($channels as $channel) {
            if (!\is_string($channel) || $channel === '' || strpbrk($channel, "\r\n\0") !== false) {
                throw new \InvalidArgumentException('A channel name is a non-empty string without CR, LF or NUL');
            }
        }
        $headers = ['X-Peregrine-Event-Stream' => array_values($channels)];
        if ($lastEventId !== null && $lastEventId !== '' && strpbrk($lastEventId, "\r\n\0") === false) {
            $headers['X-Peregrine-Last-Event-Id'] = $lastEventId;
        }

        return new Response(200, $headers, '');
    }
}
