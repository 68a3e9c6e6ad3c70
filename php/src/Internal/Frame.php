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
    public const VERSION = 3;
    public const HEADER_SIZE = 12;

    public const READY = 1;
    public const REQUEST = 2;
    public const RESPONSE = 3;
    public const STOP = 4;
    public const ERROR = 5;
    public const BODY = 6;
    public const HINTS = 7;
    public const DONE = 8;
    public const CANCEL = 9;

    /** RESPONSE and BODY flag: more of the body follows in BODY frames. */
    public const FLAG_MORE = 1;
    /** RESPONSE and BODY flag: send the body so far to the client now. */
    public const FLAG_FLUSH = 2;

    /** DONE flag: the worker exits after this request and read no request after it. */
    public const FLAG_LAST = 4;

    /** The most body bytes one frame carries; the server refuses frames over 2 MiB. */
    public const MAX_BODY_PART = 1048576;

    /** Names used in error messages, indexed by type. */
    public const NAMES = [1 => 'READY', 2 => 'REQUEST', 3 => 'RESPONSE', 4 => 'STOP', 5 => 'ERROR', 6 => 'BODY', 7 => 'HINTS', 8 => 'DONE', 9 => 'CANCEL'];

    /** The unpack() format of a frame header; keys version, type, flags, id, length. */
    public const HEADER_FORMAT = 'Cversion/Ctype/vflags/Vid/Vlength';

    public static function encode(int $type, int $id, string $payload, int $flags = 0): string
    {
        return pack('CCvVV', self::VERSION, $type, $flags, $id, \strlen($payload)) . $payload;
    }

    /**
     * Encodes a BODY frame: the next part of an answer's body. A part larger than MAX_BODY_PART
     * goes in several frames, each with $flags, so FLAG_MORE must be set unless the part ends
     * the answer, where only the last frame goes without it.
     */
    public static function body(int $id, string $part, int $flags): string
    {
        $length = \strlen($part);
        if ($length <= self::MAX_BODY_PART) {
            return self::encode(self::BODY, $id, $part, $flags);
        }
        $frames = '';
        for ($offset = 0; $offset < $length; $offset += self::MAX_BODY_PART) {
            $last = $offset + self::MAX_BODY_PART >= $length;
            $frames .= self::encode(self::BODY, $id, substr($part, $offset, self::MAX_BODY_PART), $last ? $flags : ($flags | self::FLAG_MORE));
        }

        return $frames;
    }

    /**
     * Encodes a HINTS frame: the headers of a 103 Early Hints response.
     *
     * @param array<string|int, mixed> $headers
     */
    public static function hints(int $id, array $headers): string
    {
        return self::encode(self::HINTS, $id, self::head($headers));
    }

    public static function ready(string $phpVersion): string
    {
        return self::encode(self::READY, 0, $phpVersion);
    }

    /**
     * Encodes a DONE frame: request $id has ended (its answer went before it). With $last the
     * worker says it exits and read no request after this one ($id 0: none at all).
     */
    public static function done(int $id, bool $last = false): string
    {
        return pack('CCvVV', self::VERSION, self::DONE, $last ? self::FLAG_LAST : 0, $id, 0);
    }

    /**
     * Encodes a concurrent worker's last word: DONE with LAST for request $id (the one a fatal
     * error stopped, or the last that ended), carrying the id of the last REQUEST it read, so
     * that the server gives the requests it wrote after that one to another worker.
     */
    public static function lastWord(int $id, int $lastRead): string
    {
        return pack('CCvVVV', self::VERSION, self::DONE, self::FLAG_LAST, $id, 4, $lastRead);
    }

    /**
     * Encodes a CANCEL frame, which the server sends to a worker running requests concurrently:
     * stop request $id (exec_timeout, its client left) and end it with DONE.
     */
    public static function cancel(int $id): string
    {
        return self::encode(self::CANCEL, $id, '');
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
     * A body larger than MAX_BODY_PART goes on in BODY frames; $flags apply to the answer's
     * frames as to one: with FLAG_MORE every frame has it (more follows in later frames), without
     * it the last frame ends the answer.
     *
     * @param array<string|int, mixed> $headers
     *
     * @throws \InvalidArgumentException if the status does not fit the protocol or a header
     *                                   name or value cannot be carried in the NUL-joined head
     */
    public static function response(int $id, int $status, array $headers, string $body, int $flags = 0): string
    {
        if ($status < 100 || $status > 999) {
            throw new \InvalidArgumentException("Response status $status is not between 100 and 999");
        }
        $head = self::head($headers);
        if (\strlen($body) <= self::MAX_BODY_PART) {
            $length = 6 + \strlen($head) + \strlen($body);

            return pack('CCvVVvV', self::VERSION, self::RESPONSE, $flags, $id, $length, $status, \strlen($head)) . $head . $body;
        }
        // A large body goes in parts: no frame the server reads is larger than it allows.
        return pack('CCvVVvV', self::VERSION, self::RESPONSE, $flags | self::FLAG_MORE, $id, 6 + \strlen($head), $status, \strlen($head)) . $head
            . self::body($id, $body, $flags);
    }

    /**
     * Joins header pairs with NUL bytes, the head of a RESPONSE or HINTS frame.
     *
     * @param array<string|int, mixed> $headers
     */
    private static function head(array $headers): string
    {
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
        if ($head === '') {
            return '';
        }
        // One NUL precedes every field: a NUL inside a name or value would shift the fields.
        if (substr_count($head, "\0") !== 2 * $pairs) {
            throw new \InvalidArgumentException('Response header name or value contains a NUL byte');
        }

        return substr($head, 1);
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
     * @param list<array{string, string}>                             $params  server parameters: name, value
     */
    public static function request(int $id, array $fields, array $files = [], array $headers = [], string $body = '', array $params = []): string
    {
        if (\count($fields) !== 11) {
            throw new \InvalidArgumentException('A request head has 11 fixed fields, got ' . \count($fields));
        }
        $parts = array_values($fields);
        $parts[] = (string) \count($files);
        foreach ($files as $file) {
            array_push($parts, ...array_map('strval', $file));
        }
        $parts[] = (string) \count($params);
        foreach ($params as [$name, $value]) {
            $parts[] = $name;
            $parts[] = $value;
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
