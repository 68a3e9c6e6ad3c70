<?php

declare(strict_types=1);

namespace Peregrine\Internal;

/**
 * SessionRefusal is the session save handler of a concurrent worker (workers.concurrency > 1).
 * PHP's session is the process's: one $_SESSION would be shared by every request in flight, and
 * its cookie would reach no client (header() and $_COOKIE are the process's too). So
 * session_start() in a request throws instead, from inside the request's own call, and the
 * request gets 500 with the reason in the log.
 *
 * @internal
 */
final class SessionRefusal implements \SessionHandlerInterface
{
    public function __construct(private readonly int $concurrency)
    {
    }

    /** @throws \LogicException always: nothing may open PHP's session here */
    public function open(string $path, string $name): bool
    {
        throw new \LogicException("session_start() in a concurrent worker (workers.concurrency is {$this->concurrency}): "
            . 'PHP\'s session is the process\'s, one $_SESSION for every request in flight and a cookie that reaches no client. '
            . 'Keep session data in a store of your own, keyed by a cookie of the Request, or set workers.concurrency: 1');
    }

    public function close(): bool
    {
        return true;
    }

    public function read(string $id): string|false
    {
        return false;
    }

    public function write(string $id, string $data): bool
    {
        return false;
    }

    public function destroy(string $id): bool
    {
        return false;
    }

    public function gc(int $max_lifetime): int|false
    {
        return false;
    }
}
