<?php

declare(strict_types=1);

namespace Peregrine\Internal;

/**
 * Connection reads frames from the server's pipe (fd 3) and writes frames to it (fd 4).
 *
 * Reads are large: the server may put several REQUEST frames in one write when requests are
 * waiting, and one fread() then brings them all in; receive() hands them out one by one from the
 * buffer. A frame larger than what is buffered is completed with one read of exactly the missing
 * length, so a 5 MiB body costs one copy, not a concatenation per chunk.
 *
 * @internal
 */
final class Connection
{
    /** Bytes asked for by one read; the default pipe capacity on Linux. */
    private const CHUNK = 65536;

    private string $buffer = '';
    private int $offset = 0;
    private readonly int $maxLength;

    /**
     * @param resource $in  frames from the server
     * @param resource $out frames to the server
     */
    public function __construct(
        private readonly mixed $in,
        private readonly mixed $out,
    ) {
        // PHP's own read buffer would only add a copy: we buffer here.
        stream_set_read_buffer($in, 0);
        stream_set_write_buffer($out, 0);
        $this->maxLength = self::memoryLimit();
    }

    /**
     * Opens the pipes the server gives every worker.
     *
     * @throws \RuntimeException if fd 3 or fd 4 is not open
     */
    public static function open(): self
    {
        $in = @fopen('php://fd/3', 'rb');
        $out = @fopen('php://fd/4', 'wb');
        if ($in === false || $out === false) {
            throw new \RuntimeException('Cannot open fd 3 and fd 4, the pipes a worker gets from the peregrine server '
                . '(start it with `peregrine serve worker.php`): ' . (error_get_last()['message'] ?? 'unknown error'));
        }

        return new self($in, $out);
    }

    /**
     * Returns the payload of the next REQUEST frame and sets $id to its request id, or returns
     * null on STOP or on end of input between frames. Blocks until a frame is complete.
     *
     * @throws ProtocolError on a malformed frame, a frame cut short or a failing read
     */
    public function receive(?int &$id): ?string
    {
        while (true) {
            $available = \strlen($this->buffer) - $this->offset;
            if ($available >= Frame::HEADER_SIZE) {
                $offset = $this->offset;
                // Byte comparisons and one unpack('V2'): a third of the cost of unpacking the
                // whole header by name, and this runs for every request.
                $type = $this->buffer[$offset + 1];
                [1 => $frameId, 2 => $length] = unpack('V2', $this->buffer, $offset + 4);
                if ($this->buffer[$offset] !== "\3" || ($type !== "\2" && ($type !== "\4" || $length !== 0)) || $length > $this->maxLength) {
                    throw new ProtocolError($this->describe());
                }
                $total = Frame::HEADER_SIZE + $length;
                if ($available >= $total) {
                    $payload = substr($this->buffer, $offset + Frame::HEADER_SIZE, $length);
                    $this->offset += $total;
                    if ($this->offset === \strlen($this->buffer)) {
                        $this->buffer = '';
                        $this->offset = 0;
                    }
                    $id = $frameId;

                    return $type === "\2" ? $payload : null;
                }
                if ($total - $available > self::CHUNK) {
                    // Only a REQUEST gets here: a STOP is complete with its header.
                    $payload = substr($this->buffer, $offset + Frame::HEADER_SIZE) . $this->readExactly($total - $available, $available);
                    $this->buffer = '';
                    $this->offset = 0;
                    $id = $frameId;

                    return $payload;
                }
            }
            // Silenced: a user's error handler must not turn a pipe failure into its own exception.
            $chunk = @fread($this->in, self::CHUNK);
            if ($chunk === false) {
                throw new ProtocolError('reading fd 3 failed: ' . (error_get_last()['message'] ?? 'unknown error'));
            }
            if ($chunk === '') {
                if (!feof($this->in)) {
                    continue; // interrupted by a signal
                }
                if ($available === 0) {
                    return null;
                }
                throw new ProtocolError(sprintf('end of input inside a frame: %d bytes read: %s',
                    $available, self::hex(substr($this->buffer, $this->offset, 32))));
            }
            $this->buffer = $available === 0 ? $chunk : substr($this->buffer, $this->offset) . $chunk;
            $this->offset = 0;
        }
    }

    /**
     * Writes one frame with one fwrite.
     *
     * @throws ProtocolError if the pipe is closed or fails
     */
    public function send(string $frame): void
    {
        $written = @fwrite($this->out, $frame);
        // PHP's fwrite loops until all is written on a blocking pipe; a short count means an error.
        if ($written !== \strlen($frame)) {
            throw new ProtocolError(sprintf('writing a frame of %d bytes to fd 4 failed: %s',
                \strlen($frame), error_get_last()['message'] ?? 'short write'));
        }
    }

    private function readExactly(int $length, int $buffered): string
    {
        $data = @stream_get_contents($this->in, $length);
        if ($data === false || \strlen($data) !== $length) {
            throw new ProtocolError(sprintf('end of input inside a frame: %d of %d bytes read',
                $buffered + \strlen((string) $data), $buffered + $length));
        }

        return $data;
    }

    /** Says what is wrong with the frame header at the read offset. */
    private function describe(): string
    {
        $h = unpack(Frame::HEADER_FORMAT, $this->buffer, $this->offset);
        $bytes = self::hex(substr($this->buffer, $this->offset, Frame::HEADER_SIZE));
        if ($h['version'] !== Frame::VERSION) {
            $what = "unsupported protocol version {$h['version']}";
        } elseif ($h['type'] === Frame::STOP) {
            $what = "STOP frame with a payload of {$h['length']} bytes";
        } elseif ($h['type'] !== Frame::REQUEST) {
            $what = isset(Frame::NAMES[$h['type']])
                ? 'unexpected ' . Frame::NAMES[$h['type']] . ' frame from the server'
                : "unknown frame type {$h['type']}";
        } else {
            $what = "frame of {$h['length']} bytes exceeds memory_limit";
        }

        return "protocol error: $what (frame header $bytes)";
    }

    private static function hex(string $bytes): string
    {
        return implode(' ', str_split(bin2hex($bytes), 2));
    }

    /** The largest payload this process could hold: memory_limit, or PHP_INT_MAX without one. */
    private static function memoryLimit(): int
    {
        $limit = trim((string) ini_get('memory_limit'));
        if ($limit === '' || $limit === '-1') {
            return PHP_INT_MAX;
        }
        $value = (int) $limit;
        $value *= match (strtolower(substr($limit, -1))) {
            'g' => 1 << 30,
            'm' => 1 << 20,
            'k' => 1 << 10,
            default => 1,
        };

        return $value > 0 ? $value : PHP_INT_MAX;
    }
}
