<?php

declare(strict_types=1);

namespace Peregrine\Internal;

use Peregrine\Http\Request;

/**
 * RequestDecoder turns a REQUEST payload into a Request:
 * u32 head_len | head (fields joined by NUL) | body. docs/protocol.md lists the fields.
 *
 * @internal
 */
final class RequestDecoder
{
    /** Head fields before the uploaded files: method ... form, then the file count. */
    private const FIXED_FIELDS = 12;

    /**
     * @throws ProtocolError if the payload does not follow the protocol
     */
    public static function decode(string $payload): Request
    {
        $length = \strlen($payload);
        if ($length < 4) {
            throw new ProtocolError("protocol error: REQUEST payload of $length bytes has no head length");
        }
        $headLength = unpack('V', $payload)[1];
        if ($headLength > $length - 4) {
            throw new ProtocolError("protocol error: REQUEST head of $headLength bytes exceeds its payload of $length bytes");
        }
        $fields = explode("\0", substr($payload, 4, $headLength));
        $count = \count($fields);
        if ($count < self::FIXED_FIELDS) {
            throw new ProtocolError(sprintf('protocol error: REQUEST head has %d fields, want at least %d: %s',
                $count, self::FIXED_FIELDS, json_encode(implode("\0", $fields), JSON_INVALID_UTF8_SUBSTITUTE)));
        }
        $i = self::FIXED_FIELDS;
        $uploads = [];
        if ($fields[11] !== '0') {
            $files = $fields[11];
            if (!self::isCount($files) || (int) $files > intdiv($count - $i, 6)) {
                throw new ProtocolError("protocol error: REQUEST file count \"$files\" does not fit a head of $count fields");
            }
            for ($n = (int) $files; $n > 0; --$n, $i += 6) {
                if (!self::isCount($fields[$i + 3]) || !self::isCount($fields[$i + 4])) {
                    throw new ProtocolError(sprintf('protocol error: REQUEST file "%s" has size "%s" and error "%s"',
                        $fields[$i], $fields[$i + 3], $fields[$i + 4]));
                }
                $uploads[] = [$fields[$i], $fields[$i + 1], $fields[$i + 2], (int) $fields[$i + 3], (int) $fields[$i + 4], $fields[$i + 5]];
            }
        }
        // Server parameters (CGI variables for a document root) are for the native runtime's
        // $_SERVER; this runtime builds its own from the fixed fields.
        $params = $fields[$i] ?? '';
        if (!self::isCount($params) || (int) $params > intdiv($count - $i - 1, 2)) {
            throw new ProtocolError("protocol error: REQUEST parameter count \"$params\" does not fit a head of $count fields");
        }
        $i += 1 + 2 * (int) $params;
        if (($count - $i) % 2 !== 0) {
            throw new ProtocolError('protocol error: REQUEST head has an odd number of header fields');
        }
        $headers = [];
        for (; $i < $count; $i += 2) {
            $headers[$fields[$i]][] = $fields[$i + 1];
        }

        return Request::fromFrame($fields, $headers, substr($payload, 4 + $headLength), $uploads);
    }

    private static function isCount(string $s): bool
    {
        return $s !== '' && strspn($s, '0123456789') === \strlen($s) && \strlen($s) < 19;
    }
}
