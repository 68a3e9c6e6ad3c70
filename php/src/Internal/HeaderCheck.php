<?php

declare(strict_types=1);

namespace Peregrine\Internal;

/**
 * HeaderCheck refuses response headers that would not reach the client as the one header they
 * are: a name that is not an RFC 9110 token ("Set-Cookie: a=1; X-D" taken from input would
 * become a Set-Cookie header once written as "name: value"), a value with CR, LF or NUL (PHP's
 * header() refuses those), a value that is not a string or a number.
 *
 * @internal
 */
final class HeaderCheck
{
    /** An RFC 9110 token, which a field name is. */
    private const TOKEN = '/^[!#$%&\'*+\-.^_`|~0-9A-Za-z]+$/D';

    /** How many checked names are remembered: a worker sends the same few again and again. */
    private const REMEMBERED = 256;

    /** @var array<string, true> names found to be tokens */
    private static array $tokens = [];

    /**
     * Checks a header map: name => value, or name => list of values.
     *
     * @param array<string|int, mixed> $headers
     *
     * @throws \InvalidArgumentException naming the first header that cannot be sent
     */
    public static function all(array $headers, string $what = 'Response header'): void
    {
        foreach ($headers as $name => $values) {
            $name = (string) $name; // an all-digit name is an integer key
            if (!isset(self::$tokens[$name])) {
                if (preg_match(self::TOKEN, $name) !== 1) {
                    throw new \InvalidArgumentException(sprintf('%s name %s is not a token (RFC 9110: letters, digits and !#$%%&\'*+-.^_`|~ only)',
                        $what, self::quote($name)));
                }
                if (\count(self::$tokens) < self::REMEMBERED) {
                    self::$tokens[$name] = true;
                }
            }
            if (\is_string($values)) {
                if (strpbrk($values, "\r\n\0") !== false) {
                    throw self::badValue($what, $name);
                }
                continue;
            }
            foreach (\is_array($values) ? $values : [$values] as $value) {
                if (\is_string($value)) {
                    if (strpbrk($value, "\r\n\0") !== false) {
                        throw self::badValue($what, $name);
                    }
                } elseif (!\is_int($value) && !\is_float($value)) {
                    throw new \InvalidArgumentException(sprintf('%s %s has a value of type %s, want a string or a list of strings',
                        $what, self::quote($name), get_debug_type($value)));
                }
            }
        }
    }

    private static function badValue(string $what, string $name): \InvalidArgumentException
    {
        return new \InvalidArgumentException(sprintf('%s %s has a CR, LF or NUL byte in its value', $what, self::quote($name)));
    }

    /** $s in double quotes, control and non-ASCII bytes escaped, for one log line. */
    private static function quote(string $s): string
    {
        return '"' . addcslashes($s, "\0..\37\"\\\177..\377") . '"';
    }
}
