<?php

declare(strict_types=1);

namespace Peregrine\WebSocket;

/**
 * Connection is one WebSocket connection as an event sees it. What its methods ask is carried
 * out by the server, in the order asked, once the handler returns (a throw in onMessage
 * discards it); Peregrine\WebSocket::send() and publish() act at once, from anywhere.
 */
final class Connection
{
    /** @var list<array{int, bool, int, string}> op, binary, code, data */
    private array $actions = [];

    /**
     * @param string               $id         unique across the servers of one broker; says which server holds it
     * @param array<string, mixed> $attributes kept by the server (JSON), handed back with every event
     */
    public function __construct(
        public readonly string $id,
        public array $attributes = [],
    ) {
    }

    /** Queues $data for this connection (a text message unless $binary). */
    public function send(string $data, bool $binary = false): void
    {
        if (!$binary && !(preg_match('//u', $data) === 1)) {
            throw new \InvalidArgumentException('A text message must be UTF-8: send it with $binary = true');
        }
        $this->actions[] = [1, $binary, 0, $data];
    }

    /** Closes this connection with $code (1000, or 3000-4999 for the application's own). */
    public function close(int $code = 1000, string $reason = ''): void
    {
        if ($code !== 1000 && ($code < 3000 || $code > 4999) && !\in_array($code, [1001, 1008, 1011], true)) {
            throw new \InvalidArgumentException("Close code {$code} is not one an application may send (1000, 1001, 1008, 1011, 3000-4999)");
        }
        if (\strlen($reason) > 123) {
            throw new \InvalidArgumentException('A close reason has at most 123 bytes');
        }
        $this->actions[] = [2, false, $code, $reason];
    }

    /** Adds this connection to $channel: Peregrine\WebSocket::publish($channel, ...) reaches it. */
    public function join(string $channel): void
    {
        $this->actions[] = [3, false, 0, $channel];
    }

    public function leave(string $channel): void
    {
        $this->actions[] = [4, false, 0, $channel];
    }

    /**
     * What was asked, for the server (Internal\WebSocketEvents).
     *
     * @internal
     *
     * @return list<array{int, bool, int, string}>
     */
    public function actions(): array
    {
        return $this->actions;
    }
}
