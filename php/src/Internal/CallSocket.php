<?php

declare(strict_types=1);

namespace Peregrine\Internal;

/**
 * CallSocket is this process's connection to the unix socket its server listens on for calls
 * from PHP (Peregrine\Jobs::push, Peregrine\KV): the path is in PEREGRINE_CALL_SOCKET, which
 * the server gives every worker and consumer when jobs.pipelines or kv.stores are configured.
 *
 * One connection per process, opened on first use (and again in a forked child). Each call is
 * a frame of a 4-byte little-endian length and a JSON object; the answer has the same shape
 * (docs/protocol.md, "Calls from PHP to the server"). Works on both runtimes: it is a plain
 * stream_socket_client().
 *
 * @internal
 */
final class CallSocket
{
    private static ?self $instance = null;

    /** @param resource $stream */
    private function __construct(private readonly mixed $stream, private readonly int $pid)
    {
    }

    /**
     * Sends one call and returns its answer.
     *
     * @param array<string, mixed> $request
     *
     * @return array<string, mixed>
     *
     * @throws \RuntimeException if the server is unreachable or refuses the call (its message)
     */
    public static function call(array $request): array
    {
        $json = json_encode($request, JSON_THROW_ON_ERROR | JSON_UNESCAPED_SLASHES | JSON_UNESCAPED_UNICODE);
        $socket = self::connection();
        try {
            $answer = $socket->roundTrip($json);
        } catch (\RuntimeException $e) {
            self::$instance = null; // the next call connects again
            throw $e;
        }
        if (isset($answer['error']) && \is_string($answer['error'])) {
            throw new \RuntimeException($answer['error']);
        }

        return $answer;
    }

    private static function connection(): self
    {
        if (self::$instance !== null && self::$instance->pid === getmypid()) {
            return self::$instance;
        }
        $path = getenv('PEREGRINE_CALL_SOCKET');
        if (!\is_string($path) || $path === '') {
            throw new \RuntimeException('No Peregrine server to call: PEREGRINE_CALL_SOCKET is not set. Jobs and KV work in '
                . 'workers and consumers of a server whose config has jobs.pipelines or kv.stores.');
        }
        $stream = @stream_socket_client('unix://' . $path, $code, $message, 5.0);
        if ($stream === false) {
            throw new \RuntimeException("Cannot reach the Peregrine server at {$path}: {$message}");
        }
        stream_set_timeout($stream, 60);

        return self::$instance = new self($stream, (int) getmypid());
    }

    /** @return array<string, mixed> */
    private function roundTrip(string $json): array
    {
        $frame = pack('V', \strlen($json)) . $json;
        for ($written = 0; $written < \strlen($frame); $written += $n) {
            $n = @fwrite($this->stream, substr($frame, $written));
            if ($n === false || $n === 0) {
                throw new \RuntimeException('The Peregrine server closed the call socket');
            }
        }
        $length = unpack('V', $this->read(4))[1];
        $answer = json_decode($this->read($length), true, 512, JSON_THROW_ON_ERROR);

        return \is_array($answer) ? $answer : [];
    }

    private function read(int $length): string
    {
        $data = '';
        while (\strlen($data) < $length) {
            $chunk = fread($this->stream, $length - \strlen($data));
            if ($chunk === false || $chunk === '') {
                throw new \RuntimeException('The Peregrine server closed the call socket (or did not answer within 60s)');
            }
            $data .= $chunk;
        }

        return $data;
    }
}
