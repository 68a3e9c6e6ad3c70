<?php

declare(strict_types=1);

namespace Peregrine\Http;

/**
 * Response is what a handler returns. The server adds Content-Length from the body.
 */
final class Response
{
    /**
     * @param int                                $status  HTTP status, 100 to 999
     * @param array<string, string|list<string>> $headers name => value, or name => list of values
     *                                                    for a header sent several times (Set-Cookie)
     *
     * @throws \InvalidArgumentException if the status is outside 100..999
     */
    public function __construct(
        public readonly int $status = 200,
        public readonly array $headers = [],
        public readonly string $body = '',
    ) {
        if ($status < 100 || $status > 999) {
            throw new \InvalidArgumentException("HTTP status $status is not between 100 and 999");
        }
    }
}
