<?php

declare(strict_types=1);

namespace Peregrine\Internal;

/**
 * Frame encodes the frames of the worker protocol (docs/protocol.md): a 12-byte little-endian
 * header (version, type, flags, request id, payload length) followed by the payload.
 *
 * @internal
 */
final class Frame
{
    public const VERSION = 1;
    public const HEADER_SIZE = 12;

    public const READY = 1;
    public const REQUEST = 2;
    public const RESPONSE = 3;
    public const STOP = 4;
    public const ERROR = 5;

    /** Names used in error messages, indexed by type. */
    public const NAMES = [1 => 'READY', 2 => 'REQUEST', 3 => 'RESPONSE', 4 => 'STOP', 5 => 'ERROR'];

    /** The unpack() format of a frame header; keys version, type, flags, id, length. */
    public const HEADER_FORMAT = 'Cversion/Ctype/vflags/Vid/Vlength';

    public static function encode(int $type, int $id, string $payload): string
    {
        return pack('CCvVV', self::VERSION, $type, 0, $id, \strlen($payload)) . $payload;
    }

    public static function ready(string $phpVersion): string
    {
        return self::encode(self::READY, 0, $phpVersion);
    }

    public static function stop(): string
    {
        return self::encode(self::STOP, 0, '');
    }

    public static function error(string $message): string
    {
        return self::encode(self::ERROR, 0, $message);
    }

    /**
     * Encodes a RESPONSE frame. $headers maps a name to a value or a list of values (several
     * Set-Cookie); ints and floats are accepted as values because PHP code often passes them.
     *
     * @param array<string|int, mixed> $headers
     *
     * @throws \InvalidArgumentException if the status does not fit the protocol or a header
     *                                   name or value cannot be carried in the NUL-joined head
     */
    public static function response(int $id, int $status, array $headers, string $body): string
    {
        if ($status < 100 || $status > 999) {
            throw new \InvalidArgumentException("Response status $status is not between 100 and 999");
        }
        $head = '';
        $pairs = 0;
        foreach ($headers as $name => $value) {
            if ($name === '') {
                throw new \InvalidArgumentException('Response header name is empty');
            }
            if (\is_string($value)) {
                $head .= "\0" . $name . "\0" . $value;
                ++$pairs;
                continue;
            }
            foreach (\is_array($value) ? $value : [$value] as $v) {
                $head .= "\0" . $name . "\0" . (\is_string($v) ? $v : self::scalar($name, $v));
                ++$pairs;
            }
        }
        if ($head !== '') {
            // One NUL precedes every field: a NUL inside a name or value would shift the fields.
            if (substr_count($head, "\0") !== 2 * $pairs) {
                throw new \InvalidArgumentException('Response header name or value contains a NUL byte');
            }
            $head = substr($head, 1);
        }
        $length = 6 + \strlen($head) + \strlen($body);

        return pack('CCvVVvV', self::VERSION, self::RESPONSE, 0, $id, $length, $status, \strlen($head)) . $head . $body;
    }

    /**
     * Encodes a REQUEST frame the way the server does. The worker never sends requests; tests
     * and tools use this to talk to a worker.
     *
     * @param list<string>                                            $fields  method, uri, path, query, protocol,
     *                                                                         remote address, remote port, server
     *                                                                         address, server port, scheme, form
     * @param list<array{string, string, string, int, int, string}> $files   field, client name, client type,
     *                                                                         size, error, temporary path
     * @param list<array{string, string}>                             $headers lower-case name, value
     */
    public static function request(int $id, array $fields, array $files = [], array $headers = [], string $body = ''): string
    {
        if (\count($fields) !== 11) {
            throw new \InvalidArgumentException('A request head has 11 fixed fields, got ' . \count($fields));
        }
        $parts = array_values($fields);
        $parts[] = (string) \count($files);
        foreach ($files as $file) {
            array_push($parts, ...array_map('strval', $file));
        }
        foreach ($headers as [$name, $value]) {
            $parts[] = strtolower($name);
            $parts[] = $value;
        }
        $head = implode("\0", $parts);
        if (substr_count($head, "\0") !== \count($parts) - 1) {
            throw new \InvalidArgumentException('A request field contains a NUL byte');
        }

        return self::encode(self::REQUEST, $id, pack('V', \strlen($head)) . $head . $body);
    }

    private static function scalar(string|int $name, mixed $value): string
    {
        if (\is_int($value) || \is_float($value)) {
            return (string) $value;
        }
        throw new \InvalidArgumentException(sprintf('Response header "%s" has a value of type %s, want a string or a list of strings', $name, get_debug_type($value)));
    }
}
