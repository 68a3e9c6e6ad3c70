<?php

declare(strict_types=1);

namespace Peregrine\Http;

use Peregrine\Internal\HeaderCheck;

/**
 * Response is what a handler returns.
 *
 * A string body is sent whole, and the server adds Content-Length. An iterable body (a generator,
 * an array, any Traversable of strings) is streamed: each string it yields goes to the client
 * as soon as it is yielded, which is how server-sent events and large exports are written. The
 * headers go with the first string; yield '' to send them before the first data. An exception
 * thrown before the first string is a 500; once the answer has begun it can only be cut short
 * (it is logged). A streamed body keeps the worker busy until it ends.
 */
final class Response
{
    /**
     * @param int                                $status  HTTP status, 100 to 999
     * @param array<string, string|list<string>> $headers name => value, or name => list of values
     *                                                    for a header sent several times (Set-Cookie)
     * @param string|iterable<string>            $body    the body, or its parts, streamed
     *
     * @throws \InvalidArgumentException if the status is outside 100..999, a header name is not an
     *                                   RFC 9110 token, or a value has a CR, LF or NUL byte or is
     *                                   not a string or a number: a handler that returns such a
     *                                   response is answered 500, as PHP's header() refuses it
     */
    public function __construct(
        public readonly int $status = 200,
        public readonly array $headers = [],
        public readonly string|iterable $body = '',
    ) {
        if ($status < 100 || $status > 999) {
            throw new \InvalidArgumentException("HTTP status $status is not between 100 and 999");
        }
        if ($headers !== []) {
            HeaderCheck::all($headers);
        }
    }
}
