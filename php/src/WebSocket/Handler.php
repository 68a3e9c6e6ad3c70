<?php

declare(strict_types=1);

namespace Peregrine\WebSocket;

use Peregrine\Http\Request;

/**
 * Handler receives the events of the WebSocket connections the server holds (docs/websocket.md).
 * Pass one to Peregrine\Worker::serve(..., websocket: $handler).
 *
 * The server, not PHP, holds each connection: a worker crash or a `peregrine reset` closes
 * none, and each event MAY run on any worker. The events of one connection arrive one at a
 * time and in order: onOpen, then onMessage for each message, then onClose. Per-connection
 * state belongs in Connection::$attributes, which the server keeps and hands back with every
 * event.
 */
interface Handler
{
    /**
     * A client asks to open a connection. Returning accepts it; throwing Refused answers the
     * upgrade with its status instead. Any other throw refuses it with 500.
     */
    public function onOpen(Connection $c, Request $upgrade): void;

    /**
     * A message arrived. A throw is logged and closes this connection with 1011, nothing else.
     */
    public function onMessage(Connection $c, string $data, bool $binary): void;

    /**
     * The connection closed, from either side: $code is the close code (1006 when the peer
     * vanished without one). Sends to it are dropped from now on.
     */
    public function onClose(Connection $c, int $code, string $reason): void;
}
