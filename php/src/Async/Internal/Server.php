<?php

declare(strict_types=1);

namespace Peregrine\Async\Internal;

use Peregrine\Async\CancelledException;
use Peregrine\Async\TimeoutException;
use Peregrine\Internal\Frame;
use Peregrine\Internal\ProtocolError;

/**
 * Server is the request loop of a concurrent worker (workers.concurrency > 1): it reads every
 * REQUEST frame as soon as it arrives (fd 3 is one of the loop's streams), runs each in a Fiber
 * of its own, and writes each answer, then its DONE, as it is ready, in any order; the request
 * ids tell them apart. The answers that end in one tick of the loop go out together, in one
 * blocking write before the loop waits again (Loop::beforeWait): under many short waits a tick
 * ends about ten requests, which were ten writes. Frames are never written
 * from two fibers at once (a fiber never suspends inside a write to fd 4); what a request
 * streams itself goes out before its last frames, which are queued here.
 *
 *     READY --> fd 3 readable: REQUEST -> spawn(respond) ... answer + DONE (any order)
 *                              CANCEL   -> the request's fiber is cancelled where it waits
 *                              STOP or end of input: no more reads; in-flight requests finish
 *                              malformed frame: ProtocolError out of run()
 *
 * CANCEL (docs/protocol.md, "Concurrent requests": exec_timeout, or the client left) throws a
 * TimeoutException into the request's fiber at its wait, so its finally blocks run; it still ends
 * with DONE, and the server drops the answer. Reset hooks run whenever no request is in flight.
 *
 * @internal
 */
final class Server
{
    private const CHUNK = 65536;

    private string $buffer = '';
    private int $inFlight = 0;

    /** The id of the last REQUEST read from fd 3 (0: none yet). */
    private int $lastRead = 0;
    private bool $reading = true;
    private int $reader = 0;

    /** @var array<int, \Peregrine\Async\Future> requests in flight by id */
    private array $running = [];

    /** @var array<int, true> requests in flight the server cancelled */
    private array $cancelled = [];

    /** Answers and DONEs queued by this tick, for flush(). */
    private string $out = '';

    /** @var resource */
    private mixed $in;

    /** @var \Closure(string): void queues frames for flush() */
    private \Closure $send;

    /** @var \Closure(string): void writes frames whole to fd 4 */
    private \Closure $realSend;

    /** @var \Closure(int): void */
    private \Closure $ended;

    /**
     * @param \Closure(string): void $log one line to the worker's log
     */
    public function __construct(
        private readonly \Closure $log,
        private readonly int $maxLength = PHP_INT_MAX,
    ) {
    }

    /**
     * Serves until STOP or end of input and every request in flight has ended.
     *
     * @param \Closure(int, string): string $respond the answer's frames (or its last ones, when it
     *                                               sent the others itself), given the REQUEST's
     *                                               id and payload; runs in the request's fiber
     * @param \Closure(string): void        $send    writes frames whole to fd 4
     * @param \Closure(int): void           $ended   after a request's DONE went out
     * @param \Closure(): void              $idle    when no request is in flight (reset hooks)
     *
     * @throws ProtocolError on a malformed frame or a failing pipe
     */
    public function run(\Closure $respond, \Closure $send, \Closure $ended, \Closure $idle): void
    {
        $in = self::open(3, 'rb');
        $this->in = $in;
        $this->send = function (string $frames): void {
            $this->out .= $frames;
        };
        $this->realSend = $send;
        $this->ended = $ended;
        stream_set_blocking($in, false);
        stream_set_read_buffer($in, 0);
        $loop = Loop::get();
        $loop->setWarn($this->log);
        Hooks::$enabled = true;
        Amp::install($loop); // when the application loaded Amp: its loop runs on this one
        $flusher = $loop->beforeWait($this->flush(...));
        $this->reader = $loop->onReadable($in, function () use ($loop, $respond, $ended, $idle): void {
            foreach ($this->read() as [$id, $payload]) {
                $this->start($loop, $id, $payload, $respond, $ended, $idle);
            }
        });
        try {
            $loop->run();
            $this->flush();
        } finally {
            Hooks::$enabled = false;
            $loop->cancel($this->reader);
            $loop->cancel($flusher);
            fclose($in);
        }
    }

    /**
     * Writes the answers queued since the last flush. The worker's last word after a fatal error
     * calls it first, so that requests answered in the tick it ended are not lost with it.
     *
     * @throws ProtocolError if the pipe is gone
     */
    public function flush(): void
    {
        if ($this->out === '') {
            return;
        }
        $out = $this->out;
        $this->out = '';
        ($this->realSend)($out);
    }

    /** The id of the last REQUEST read, for the worker's last word (Frame::lastWord()). */
    public function lastRead(): int
    {
        return $this->lastRead;
    }

    /**
     * The id of the request in flight whose fiber (its own, or an async() one of it) runs now; 0
     * when there is none. In a shutdown function after a fatal error (or exit()) ended the
     * process inside a fiber, the request that was running then: the worker names it in its last
     * word (docs/protocol.md, "Concurrent requests").
     */
    public function current(): int
    {
        $id = Loop::get()->running()?->request ?? 0;

        return isset($this->running[$id]) ? $id : 0;
    }

    /**
     * @param \Closure(int, string): string $respond
     * @param \Closure(int): void           $ended
     * @param \Closure(): void              $idle
     */
    private function start(Loop $loop, int $id, string $payload, \Closure $respond, \Closure $ended, \Closure $idle): void
    {
        ++$this->inFlight;
        $future = $loop->spawn(static fn (): string => $respond($id, $payload), self::path($payload), $id);
        $this->running[$id] = $future;
        $future->subscribe(function (?\Throwable $error, mixed $answer) use ($id, $ended, $idle): void {
            unset($this->running[$id]);
            $cancelled = isset($this->cancelled[$id]);
            unset($this->cancelled[$id]);
            if ($cancelled && $error instanceof CancelledException) {
                $answer = ''; // what it had not answered stays unanswered: the server drops it anyway
            } elseif ($error !== null) { // $respond never throws but for the pipe, or a cancellation it let out
                if ($error instanceof ProtocolError) {
                    throw $error;
                }
                ($this->log)('peregrine: request failed: ' . $error::class . ': ' . $error->getMessage());
                $answer = Frame::response($id, $error instanceof TimeoutException ? 504 : 500, ['Content-Type' => 'text/plain; charset=utf-8'], 'Internal Server Error');
            }
            ($this->send)($answer . Frame::done($id));
            $ended($id);
            if (--$this->inFlight === 0) {
                $this->flush(); // the answers first: reset hooks run on the worker's time
                $idle();
            }
        });
    }

    /**
     * Reads what fd 3 has and returns the complete REQUEST frames in it as [id, payload]. STOP
     * or end of input ends the reading.
     *
     * @return list<array{int, string}>
     *
     * @throws ProtocolError
     */
    private function read(): array
    {
        if (!$this->reading) {
            return [];
        }
        $chunk = @fread($this->in, self::CHUNK);
        if ($chunk === false) {
            throw new ProtocolError('reading fd 3 failed: ' . (error_get_last()['message'] ?? 'unknown error'));
        }
        if ($chunk === '' && feof($this->in)) {
            if ($this->buffer !== '') {
                throw new ProtocolError(sprintf('end of input inside a frame: %d bytes read', \strlen($this->buffer)));
            }
            $this->stopReading();

            return [];
        }
        $this->buffer .= $chunk;
        $requests = [];
        $offset = 0;
        $available = \strlen($this->buffer);
        while ($available - $offset >= Frame::HEADER_SIZE) {
            $type = $this->buffer[$offset + 1];
            [1 => $id, 2 => $length] = unpack('V2', $this->buffer, $offset + 4);
            if ($this->buffer[$offset] !== "\3" || ($type !== "\2" && (($type !== "\4" && $type !== "\x09") || $length !== 0)) || $length > $this->maxLength) {
                throw new ProtocolError(sprintf('protocol error: unexpected frame header %s',
                    implode(' ', str_split(bin2hex(substr($this->buffer, $offset, Frame::HEADER_SIZE)), 2))));
            }
            if ($available - $offset < Frame::HEADER_SIZE + $length) {
                break;
            }
            if ($type === "\4") {
                $this->stopReading();

                return $requests;
            }
            if ($type === "\x09") { // CANCEL: a request in this read has not started yet, but is spawned
                $offset += Frame::HEADER_SIZE;
                $this->cancel($id, $requests);

                continue;
            }
            $requests[] = [$id, substr($this->buffer, $offset + Frame::HEADER_SIZE, $length)];
            $this->lastRead = $id;
            $offset += Frame::HEADER_SIZE + $length;
        }
        $this->buffer = $offset === $available ? '' : substr($this->buffer, $offset);

        return $requests;
    }

    /**
     * Cancels request $id: in flight, its fiber; still in $requests (read with the CANCEL), it is
     * never started and ends with DONE alone.
     *
     * @param list<array{int, string}> $requests
     */
    private function cancel(int $id, array &$requests): void
    {
        if (isset($this->running[$id])) {
            $this->cancelled[$id] = true;
            $this->running[$id]->cancel(new TimeoutException('The server cancelled the request (exec_timeout, or its client left)'));
        }
        foreach ($requests as $i => [$pending]) {
            if ($pending === $id) {
                array_splice($requests, $i, 1);
                ($this->send)(Frame::done($id));
                ($this->ended)($id);

                return;
            }
        }
    }

    private function stopReading(): void
    {
        $this->reading = false;
        $this->buffer = '';
        Loop::get()->cancel($this->reader);
    }

    /**
     * Opens one of the worker's pipes: php://fd/N under the CLI, peregrine_async_pipe() under the
     * native runtime (PHP gives php://fd to the CLI only). Either is a stream on a dup() of fd N.
     *
     * @return resource
     *
     * @throws ProtocolError if it cannot be opened
     */
    public static function open(int $fd, string $mode): mixed
    {
        $stream = \function_exists('peregrine_async_pipe') ? \peregrine_async_pipe($fd) : @fopen("php://fd/$fd", $mode);
        if ($stream === false) {
            throw new ProtocolError("cannot open fd $fd, the worker's pipe from the server: " . (error_get_last()['message'] ?? 'unknown error'));
        }

        return $stream;
    }

    /** The request's path (field 2 of its head), for warnings. */
    private static function path(string $payload): string
    {
        $fields = explode("\0", substr($payload, 4, 4096), 4);

        return $fields[2] ?? '';
    }
}
