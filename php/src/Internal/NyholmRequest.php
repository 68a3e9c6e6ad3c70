<?php

declare(strict_types=1);

namespace Peregrine\Internal;

use Nyholm\Psr7\Factory\Psr17Factory;
use Nyholm\Psr7\ServerRequest;
use Nyholm\Psr7\Stream;
use Nyholm\Psr7\Uri;

/**
 * NyholmRequest makes the PSR-7 request of both runtimes when the app serves with Nyholm's
 * Psr17Factory (PsrBridge, NativePsrRequest): the ServerRequest that the factory's
 * createServerRequest() followed by withProtocolVersion(), a withHeader() per header and
 * withBody() would make, for a fraction of their cost.
 *
 * Nyholm's constructor checks every header name and value with a regular expression each and
 * trims each value, about 2,800 instructions a header, more than the rest of the request. The
 * server's headers pass those checks as a rule: lower-case token names, values without a control
 * character or space around them. make() checks that for all of them at once and then sets the
 * request's fields itself, as the constructor would have; any request it cannot vouch for this
 * way (a name with an upper-case letter or an integer key, a value Nyholm would refuse or trim, no
 * Host header) goes through Nyholm's constructor, which throws or normalises as it always has; so
 * does a request with one header, for which the constructor's checks cost less than make()'s.
 * Its Uri, immutable, is shared by the requests for one URI.
 *
 * The fields are Nyholm's private properties (nyholm/psr7 1.x). make() uses them only after it
 * has checked once, per process, that they exist and that a request made so equals the one the
 * constructor makes; a Nyholm that differs gets the constructor for every request.
 *
 * @internal
 */
final class NyholmRequest
{
    /** Most URIs a worker sees are few and repeat; at this many cached, the cache starts over. */
    private const URI_CACHE_SIZE = 256;

    /**
     * What a header name may not hold to be set directly, in the names joined by line feeds: a
     * byte that is not in a lower-case token, no byte at all, or an integer ("123", "-1": PHP makes an
     * integer key of it, which Nyholm turns back into a string).
     */
    private const NAME_REFUSED = "/[^\\n!#$%&'*+.^_`|~0-9a-z-]|^\\n|\\n\\n|\\n\\z|(?:^|\\n)-?[0-9]+(?:\\n|\\z)/";

    /**
     * A value byte Nyholm refuses (it allows tab, space, 0x21-0x7E and 0x80-0xFF), or space that
     * it would trim, in the values each preceded by a line feed.
     */
    private const VALUE_REFUSED = "/[^\\n \\t\\x21-\\x7E\\x80-\\xFF]|\\n[ \\t]|[ \\t](?:\\n|$)/D";

    /** The fields the constructor sets; the others keep their declared defaults. */
    private const FIELDS = ['method', 'uri', 'headers', 'headerNames', 'protocol', 'stream', 'serverParams'];

    /** @var array<string, Uri> */
    private static array $uris = [];

    /** Whether the fields can be set directly: null until checked. */
    private static ?bool $direct = null;

    /** A ServerRequest with its declared defaults, cloned for each request. */
    private static ServerRequest $blank;

    /** @var \Closure(ServerRequest, string, Uri, array<string, list<string>>, array<string, string>, string, string, array<mixed>): ServerRequest */
    private static \Closure $fill;

    /** Whether make() may stand for $factory: exactly Nyholm's class, as a subclass may override what it skips. */
    public static function serves(object $factory): bool
    {
        return $factory::class === Psr17Factory::class;
    }

    /**
     * @param array<string|int, list<string>> $headers the request's headers, name => values
     * @param array<mixed>                    $server  the server params
     *
     * @throws \InvalidArgumentException if the URI or a header is not valid, as Nyholm's would
     */
    public static function make(string $method, string $uri, array $headers, string $body, string $version, array $server): ServerRequest
    {
        if (!isset(self::$uris[$uri])) {
            if (\count(self::$uris) === self::URI_CACHE_SIZE) {
                self::$uris = [];
            }
            self::$uris[$uri] = new Uri($uri);
        }
        // One header (Host alone, as wrk sends): Nyholm's checks cost less than names()' calls.
        $names = \count($headers) > 1 && (self::$direct ?? self::check()) ? self::names($headers) : null;
        if ($names === null) {
            return new ServerRequest($method, self::$uris[$uri], $headers, $body === '' ? null : $body, $version, $server);
        }

        return (self::$fill)(clone self::$blank, $method, self::$uris[$uri], $headers, $names, $body, $version, $server);
    }

    /**
     * The map of lower-case names to names Nyholm's constructor would make of $headers, or null
     * when it might refuse one or change one, or add Host (see the class comment). Checked with
     * a few calls over all the names and all the values, not a loop: fewer instructions.
     *
     * @param array<string|int, list<string>> $headers
     *
     * @return array<string, string>|null
     */
    private static function names(array $headers): ?array
    {
        if (!isset($headers['host']) || \in_array([], $headers, true)) {
            return null;
        }
        $names = array_keys($headers);
        $joined = implode("\n", $names);
        $values = array_merge(...array_values($headers));
        $lines = "\n" . implode("\n", $values);
        if (preg_match(self::NAME_REFUSED, $joined) !== 0
            || substr_count($joined, "\n") !== \count($names) - 1 // a line feed in a name
            || substr_count($lines, "\n") !== \count($values) // or in a value
            || preg_match(self::VALUE_REFUSED, $lines) !== 0) {
            return null;
        }

        /** @var list<string> $names all-digit names, which could be integer keys, were refused */
        return array_combine($names, $names);
    }

    /** Sets $direct: whether this Nyholm has the fields make() sets, and a request made so equals its constructor's. */
    private static function check(): bool
    {
        self::$direct = false;
        foreach (self::FIELDS as $field) {
            if (!property_exists(ServerRequest::class, $field)) {
                return false;
            }
        }
        self::$blank = (new \ReflectionClass(ServerRequest::class))->newInstanceWithoutConstructor();
        self::$fill = \Closure::bind(static function (ServerRequest $request, string $method, Uri $uri, array $headers, array $names, string $body, string $version, array $server): ServerRequest {
            $request->method = $method;
            $request->uri = $uri;
            $request->headers = $headers;
            $request->headerNames = $names;
            $request->protocol = $version;
            $request->serverParams = $server;
            if ($body !== '') {
                $request->stream = Stream::create($body);
            }

            return $request;
        }, null, ServerRequest::class);
        $headers = ['host' => ['example.com'], 'accept' => ['*/*', 'text/html']];
        $uri = new Uri('https://example.com/a?b=c');
        $made = (self::$fill)(clone self::$blank, 'POST', $uri, $headers, self::names($headers) ?? [], '', '2', ['X' => 'y']);
        self::$direct = $made == new ServerRequest('POST', $uri, $headers, null, '2', ['X' => 'y']);

        return self::$direct;
    }
}
