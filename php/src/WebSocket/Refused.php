<?php

declare(strict_types=1);

namespace Peregrine\WebSocket;

/**
 * Refused, thrown from Handler::onOpen, answers the upgrade request with $status (and the
 * message as a plain-text body) instead of opening the connection.
 */
final class Refused extends \RuntimeException
{
    public function __construct(public readonly int $status = 403, string $reason = '')
    {
        if ($status < 200 || $status > 599) {
            throw new \InvalidArgumentException("Refused needs an HTTP status from 200 to 599, got {$status}");
        }
        parent::__construct($reason);
    }
}
