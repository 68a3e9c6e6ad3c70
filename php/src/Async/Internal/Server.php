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
 * On the native runtime each request has PHP header state of its own (native/async.c): what its
 * fibers give header(), setcookie() and http_response_code() is its own, taken by its answer
 * (headers()) and freed when it ends; nothing of it outlives the request.
 *
 * CANCEL (docs/protocol.md, "Concurrent requests": exec_timeout, or the client left) throws a
 * TimeoutException into the request's fiber at its wait, so its finally blocks run; it still ends
 * with DONE, and the server drops the answer. Reset hooks run whenever no request is in flight.
 *
 * In direct mode (fd 4 is the worker's own event loop, native/direct.c) the worker must not
 * keep making answers for a client that does not read them: a streamed answer's fiber waits
 * (room()) after each part while its connection holds more than the runtime allows, and a
 * whole answer larger than WHOLE is written by its own fiber, which waits the same before its
 * request ends. Its CANCEL comes when the client leaves or write_timeout passes without room.
 *
 * @internal
 */
final class Server
{
    private const CHUNK = 65536;

    /** In direct mode, an answer larger than this is written by its own fiber, which waits for room (writeAnswer()). */
    private const WHOLE = 262144;

    /** Whether fd 4 is direct mode's loop, which may ask a fiber to wait for its client (room()). */
    private bool $direct = false;

    /** @var array<int, Suspension> fibers waiting for their client to take what it was sent, by request */
    private array $blocked = [];

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
        $this->direct = \function_exists('peregrine_direct_full') && stream_get_meta_data($in)['stream_type'] === 'peregrine-direct';
        $loop = Loop::get();
        $loop->setWarn($this->log);
        Hooks::$enabled = true;
        Amp::install($loop); // when the application loaded Amp: its loop runs on this one
        $flusher = $loop->beforeWait($this->flush(...));
        $perRequest = \function_exists('peregrine_headers_switch');
        if ($perRequest) {
            $loop->onSwitch(\peregrine_headers_switch(...));
        }
        $this->reader = $loop->onReadable($in, function () use ($loop, $respond, $ended, $idle): void {
            foreach ($this->read() as [$id, $payload]) {
                $this->start($loop, $id, $payload, $respond, $ended, $idle);
            }
            if ($this->blocked !== []) { // reading ran the runtime's loop: clients took some
                foreach (\peregrine_direct_drained() as $id) {
                    ($this->blocked[$id] ?? null)?->resume();
                }
            }
        });
        try {
            $loop->run();
            $this->flush();
        } finally {
            if ($perRequest) {
                $loop->onSwitch(null);
                \peregrine_headers_switch(0);
            }
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

    /**
     * In direct mode, waits while the connection of request $id holds more of what it was sent
     * than the runtime allows (native/direct.c, HELD_CAP): the fiber that writes to a client that
     * reads slowly goes on as the client reads, and one that does not read holds no more. Only
     * the request's fiber waits; the others and the worker's other connections go on. Returns at
     * once elsewhere.
     *
     * @throws CancelledException the request's CANCEL: its client left, or took nothing for
     *                            http.write_timeout
     */
    public function room(int $id): void
    {
        if (!$this->direct || !\peregrine_direct_full($id)) {
            return;
        }
        $suspension = Loop::get()->suspension();
        $this->blocked[$id] = $suspension;
        try {
            $suspension->suspend();
        } finally {
            unset($this->blocked[$id]);
        }
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
     * What PHP's header() and setcookie() gave the request whose fiber runs now (on the native
     * runtime; elsewhere none), as [name, value] pairs; its state is freed, so what it sets
     * later goes nowhere. The status line and "Status:" are left out: the answer's status is its
     * Response's, as with one request at a time (NativeServer).
     *
     * @return list<array{string, string}>
     */
    public static function headers(): array
    {
        $id = Loop::get()->running()?->request ?? 0;
        if ($id === 0 || !\function_exists('peregrine_headers_close')) {
            return [];
        }
        $pairs = [];
        foreach (\peregrine_headers_close($id)[1] ?? [] as $line) {
            $colon = strpos($line, ':');
            $name = $colon === false ? '' : rtrim(substr($line, 0, $colon));
            if ($name !== '' && strcasecmp($name, 'Status') !== 0) {
                $pairs[] = [$name, ltrim(substr($line, $colon + 1), " \t")];
            }
        }

        return $pairs;
    }

    /**
     * @param \Closure(int, string): string $respond
     * @param \Closure(int): void           $ended
     * @param \Closure(): void              $idle
     */
    private function start(Loop $loop, int $id, string $payload, \Closure $respond, \Closure $ended, \Closure $idle): void
    {
        ++$this->inFlight;
        if (\function_exists('peregrine_headers_open')) {
            \peregrine_headers_open($id);
        }
        $work = $this->direct
            ? fn (): string => $this->writeAnswer($id, $respond($id, $payload))
            : static fn (): string => $respond($id, $payload);
        $future = $loop->spawn($work, self::path($payload), $id);
        $this->running[$id] = $future;
        $future->subscribe(function (?\Throwable $error, mixed $answer) use ($id, $ended, $idle): void {
            unset($this->running[$id]);
            if (\function_exists('peregrine_headers_close')) {
                \peregrine_headers_close($id); // an answer that did not take them: a failure, a cancel
            }
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
     * Returns $answer (request $id's frames) for flush(), or, in direct mode when it is larger
     * than WHOLE, writes it now and waits (room()) until the client has taken most of it before
     * the request ends, and returns ''. The answer is handed over whole, not kept here a frame at
     * a time: PHP made it whole already, and kept by a waiting fiber it would count towards
     * memory_limit, whose fatal error ends every request of the worker. While it waits the
     * request keeps its place among workers.concurrency (a worker whose places all wait for
     * clients accepts no more connections: clients that do not read hold at most that many
     * answers) and its DONE, queued after it, follows it.
     */
    private function writeAnswer(int $id, string $answer): string
    {
        if (!$this->direct || \strlen($answer) <= self::WHOLE) {
            return $answer;
        }
        ($this->realSend)($answer);
        unset($answer); // the runtime holds what the client has not taken
        $this->room($id);

        return '';
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
