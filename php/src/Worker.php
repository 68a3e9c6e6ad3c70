<?php

declare(strict_types=1);

namespace Peregrine;

use Peregrine\Http\Response;
use Peregrine\Internal\Connection;
use Peregrine\Internal\CurrentRequest;
use Peregrine\Internal\Frame;
use Peregrine\Internal\Handling;
use Peregrine\Internal\LeakReport;
use Peregrine\Internal\NativeServer;
use Peregrine\Internal\ProtocolError;
use Peregrine\Internal\PsrBridge;
use Peregrine\Internal\RequestDecoder;
use Peregrine\Internal\ServerParams;
use Peregrine\Internal\SessionRefusal;
use Peregrine\Internal\Sessions;
use Peregrine\Internal\Superglobals;
use Psr\Http\Message\ResponseInterface;

/**
 * Worker is the PHP end of a peregrine worker process: it receives the requests the server
 * hands it and answers each one with the handler's response.
 *
 * Lifecycle:
 *
 *     create() --> serve*() sends READY --> request -> handler -> response -> reset hooks --+
 *                                    ^                                                  |
 *                                    +--------------------------------------------------+
 *                  STOP or end of input: serve*() returns, the script ends with exit 0
 *                  malformed frame: an ERROR frame is sent and the process exits with 70
 *
 * An exception or error thrown while handling a request becomes a 500 response, is reported on
 * STDERR in one line, and the worker goes on with the next request.
 *
 * A response whose body is an iterable (raw mode) or a stream that is not seekable (PSR mode) is
 * streamed: each part goes to the client as it comes (RESPONSE and BODY frames with FLAG_FLUSH),
 * and the worker takes its next request once the body ends.
 */
final class Worker
{
    /** Exit status after a protocol error (EX_SOFTWARE). */
    private const EXIT_PROTOCOL = 70;

    /** @var list<callable> */
    private array $resetHooks = [];

    /** The last request that ended (its DONE went out); 0 before the first. */
    private int $lastId = 0;

    /** Between a REQUEST and its DONE. */
    private bool $inRequest = false;

    /** @var array<int, string> "METHOD /uri" of the requests in flight by id, for the log of their failures */
    private array $naming = [];

    /** The server said STOP (or closed the pipe): it expects nothing more. */
    private bool $stopped = false;

    /** The request loop of a concurrent worker, once it runs: streamed parts wait for room on it. */
    private ?Async\Internal\Server $server = null;

    /**
     * @param resource $log where failures are reported
     */
    private function __construct(
        private readonly ?Connection $connection,
        private readonly mixed $log,
        private readonly ?NativeServer $native = null,
        private readonly int $concurrency = 1,
    ) {
    }

    /**
     * Connects to the server that started this process.
     *
     * @throws \RuntimeException if the process was not started by the peregrine server
     */
    public static function create(): self
    {
        if (getenv('PEREGRINE_PROTOCOL') !== '3') {
            throw new \RuntimeException('This script must be started by the peregrine server, e.g. '
                . '`peregrine serve worker.php`: PEREGRINE_PROTOCOL=3 is not set in its environment.');
        }
        // workers.concurrency above 1: requests run side by side, each in a Fiber of its own
        // (Async\Internal\Server), on both runtimes; the native runtime also makes sleep() and
        // socket streams suspend only the request's fiber (docs/concurrency.md).
        $concurrency = (int) getenv('PEREGRINE_CONCURRENCY');
        if ($concurrency > 1) {
            $connection = new Connection(Async\Internal\Server::open(3, 'rb'), Async\Internal\Server::open(4, 'wb'));

            return new self($connection, STDERR, null, $concurrency);
        }

        // Under Peregrine's native runtime (peregrine-php) PHP itself speaks to the server, and
        // PHP's own functions (header(), sessions, php://input, exit) work as under PHP-FPM.
        if (\function_exists('peregrine_handle_request')) {
            return new self(null, null, new NativeServer());
        }

        return new self(Connection::open(), STDERR);
    }

    /**
     * Adds a hook that runs after every request, whatever the handler returned or threw: the
     * place to close what must not leak into the next request. A hook that throws is reported
     * on STDERR; the worker goes on.
     */
    public function onReset(callable $hook): self
    {
        $this->native?->onReset($hook);
        $this->resetHooks[] = $hook;

        return $this;
    }

    /**
     * Serves requests until the server says stop: each one goes to $handler(Request): Response,
     * and, with $websocket, the events of the WebSocket connections the server holds go to it
     * (docs/websocket.md).
     *
     * @param callable(Http\Request): Response $handler
     */
    public function serve(callable $handler, ?WebSocket\Handler $websocket = null): void
    {
        if ($websocket !== null) {
            $handler = Internal\WebSocketEvents::wrap($handler, $websocket);
        }
        $this->watchLeaks();
        if ($this->native !== null) {
            $this->native->serve($handler);

            return;
        }
        $this->run(function (int $id, string $payload) use ($handler): string {
            $request = RequestDecoder::decode($payload);
            $this->naming[$id] = $request->method . ' ' . $request->uri;
            [$response, $session] = $this->session($request->cookies, static fn (): mixed => $handler($request));
            if ($response instanceof \Throwable) {
                return $this->fail($id, Handling::describe($response), $response);
            }
            if ($response instanceof Response) {
                if ($this->concurrency > 1) {
                    $session = self::unlessSet($session, static fn (string $name): bool => self::sets($response->headers, $name));
                }
                if (!\is_string($response->body)) {
                    return $this->stream($id, $response->status, self::withHeaders($response->headers, $session), $response->body);
                }
                try {
                    return Frame::response($id, $response->status, self::withHeaders($response->headers, $session), $response->body);
                } catch (\Throwable $e) {
                    return $this->fail($id, Handling::describe($e), $e);
                }
            }

            return $this->fail($id, 'The handler returned ' . get_debug_type($response) . ', not a ' . Response::class);
        });
    }

    /**
     * Serves requests with PSR-7 messages: $handler is a PSR-15 request handler, or any object
     * with handle(ServerRequestInterface): ResponseInterface, or a callable taking a
     * ServerRequestInterface and returning a ResponseInterface. $factory implements the PSR-17
     * server request, stream, uploaded file and response factories, e.g. Nyholm's Psr17Factory.
     *
     * With $websocket, the events of the WebSocket connections the server holds go to it
     * (docs/websocket.md); $factory must then be a PSR-17 response factory too.
     *
     * @throws \InvalidArgumentException if $handler or $factory is unusable; nothing is served then
     */
    public function servePsr(callable|object $handler, object $factory, ?WebSocket\Handler $websocket = null): void
    {
        if ($websocket !== null) {
            $handler = Internal\PsrWebSocketEvents::wrap(Handling::psrHandler($handler), $factory, $websocket);
        }
        $this->watchLeaks();
        if ($this->native !== null) {
            $this->native->servePsr($handler, $factory);

            return;
        }
        $handle = Handling::psrHandler($handler);
        $bridge = new PsrBridge($factory, $this->serverParams());
        $this->run(function (int $id, string $payload) use ($handle, $bridge): string {
            $request = RequestDecoder::decode($payload);
            $this->naming[$id] = $request->method . ' ' . $request->uri;
            [$response, $session] = $this->session($request->cookies, static fn (): mixed => $handle($bridge->request($request)));
            if ($response instanceof \Throwable) {
                return $this->fail($id, Handling::describe($response), $response);
            }
            if ($response instanceof ResponseInterface) {
                if ($this->concurrency > 1) {
                    $session = self::unlessSet($session, $response->hasHeader(...));
                }
                foreach ($session as [$name, $value]) {
                    $response = $response->withAddedHeader($name, $value);
                }
                $parts = PsrBridge::parts($response);
                if ($parts !== null) {
                    return $this->stream($id, $response->getStatusCode(), $response->getHeaders(), $parts);
                }
                try {
                    return $bridge->response($id, $response);
                } catch (\Throwable $e) {
                    return $this->fail($id, Handling::describe($e), $e);
                }
            }

            return $this->fail($id, 'The handler returned ' . get_debug_type($response) . ', not a ' . ResponseInterface::class);
        });
    }

    /**
     * Runs background jobs until the server says stop (a consumer of jobs.consumers, docs/jobs.md):
     * each job goes to $consumer(Jobs\Job). Returning acknowledges the job; a throw fails this
     * attempt (retried after the pipeline's backoff, dead-lettered after its last), as does a
     * crash or the pipeline's timeout.
     *
     * @param callable(Jobs\Job): mixed $consumer
     */
    public function consume(callable $consumer): void
    {
        $this->serve(Internal\JobConsumer::handler($consumer));
    }

    /**
     * Serves requests with a script written for PHP-FPM: before each call of $script the
     * superglobals describe the request; what it echoes is the body, http_response_code() the
     * status and Peregrine\Http\header() the headers; afterwards the superglobals are restored.
     */
    public function serveGlobals(callable $script): void
    {
        if ($this->concurrency > 1) {
            throw new \RuntimeException("workers.concurrency is {$this->concurrency}, but serveGlobals() runs one request at a time "
                . '(the superglobals, header() and the output are the process\'s): set workers.concurrency: 1, or serve with serve() or servePsr()');
        }
        $this->watchLeaks();
        if ($this->native !== null) {
            $this->native->serveGlobals($script);

            return;
        }
        $globals = new Superglobals($this->serverParams());
        $this->run(function (int $id, string $payload) use ($globals, $script): string {
            $request = RequestDecoder::decode($payload);
            $this->naming[$id] = $request->method . ' ' . $request->uri;
            try {
                $response = $globals->run($request, $script);

                return Frame::response($id, $response->status, $response->headers, $response->body);
            } catch (\Throwable $e) {
                return $this->fail($id, Handling::describe($e), $e);
            }
        });
    }

    /**
     * The loop shared by the serve methods. $respond turns a REQUEST payload into the frames of
     * its answer (or the last of them, when it streamed the others).
     *
     * @param \Closure(int, string): string $respond
     */
    private function run(\Closure $respond): void
    {
        if ($this->concurrency > 1) {
            $this->runConcurrently($respond);

            return;
        }
        $connection = $this->connection;
        CurrentRequest::$connection = $connection;
        // However the script ends between requests (exit() in a reset hook, a fatal error
        // there), the server learns that requests it wrote after the last one went unread, and
        // gives them to another worker. Inside a request, a fatal error before the answer began
        // is answered 500, as PHP-FPM answers it (the native runtime does the same in C); any
        // other end (exit(), a streamed answer cut short) leaves the end of the pipe to say the
        // request failed (502).
        register_shutdown_function(function () use ($connection): void {
            if ($this->stopped) {
                return;
            }
            try {
                if (!$this->inRequest) {
                    $connection->send(Frame::done($this->lastId, true));
                } elseif (CurrentRequest::$id !== 0 && Handling::isFatal(error_get_last())) {
                    $id = CurrentRequest::$id;
                    $connection->send(Frame::response($id, 500, [], '') . Frame::done($id, true));
                }
            } catch (ProtocolError) {
                // The server is gone.
            }
        });
        try {
            $connection->send(Frame::ready(PHP_VERSION));
            while (($payload = $connection->receive($id)) !== null) {
                $this->inRequest = true;
                CurrentRequest::$id = $id; // for earlyHints() until the answer begins
                $answer = $respond($id, $payload);
                unset($this->naming[$id]);
                CurrentRequest::$id = 0;
                // A non-removable output buffer stays open for good: the next request would
                // start inside it. Exit after the answer, so the server starts a clean worker.
                $stuck = Superglobals::stuck();
                // The answer and the request's end in one write, before the next request of a
                // batch: a crash loses nothing answered. Reset hooks run after it, on the
                // next request's time.
                $connection->send($answer . Frame::done($id, $stuck));
                $this->lastId = $id;
                $this->inRequest = false;
                if ($stuck) {
                    $this->stopped = true; // said already
                    $this->log('An output buffer that cannot be removed (ob_start with flags 0) was left open; exiting so that the server replaces this worker');
                    exit(0);
                }
                if ($this->resetHooks !== []) {
                    $this->reset();
                }
            }
            $this->stopped = true;
        } catch (ProtocolError $e) {
            $this->stopped = true; // the ERROR frame is its last word
            $this->log($e->getMessage());
            try {
                $connection->send(Frame::error($e->getMessage()));
            } catch (ProtocolError) {
                // The server is gone; the log line above is all that can be said.
            }
            exit(self::EXIT_PROTOCOL);
        }
    }

    /**
     * The loop of a concurrent worker: every request in a fiber of its own, answers in any order
     * (Async\Internal\Server). Reset hooks run whenever no request is in flight.
     *
     * @param \Closure(int, string): string $respond
     */
    private function runConcurrently(\Closure $respond): void
    {
        $connection = $this->connection;
        CurrentRequest::$connection = $connection;
        // PHP's session is the process's: session_start() in a request fails it, rather than
        // share one $_SESSION between clients (after output PHP refuses to start one anyway).
        if (\function_exists('session_set_save_handler') && !headers_sent() && session_status() === PHP_SESSION_NONE) {
            session_set_save_handler(new SessionRefusal($this->concurrency), false);
        }
        $server = new Async\Internal\Server(fn (string $line) => $this->log($line));
        $this->server = $server;
        // The last word of a worker that exits by itself names the request whose fiber was
        // running when a fatal error (or exit()) ended the process: the server answers that one
        // 500 and logs it. The others in flight are lost with the process.
        register_shutdown_function(function () use ($connection, $server): void {
            if ($this->stopped) {
                return;
            }
            try {
                $server->flush();
                $connection->send(Frame::lastWord($server->current() ?: $this->lastId, $server->lastRead()));
            } catch (ProtocolError) {
                // The server is gone.
            }
        });
        try {
            $connection->send(Frame::ready(PHP_VERSION));
            $server->run(
                static function (int $id, string $payload) use ($respond): string {
                    CurrentRequest::opened($id); // earlyHints() from its fibers, until its answer begins
                    try {
                        return $respond($id, $payload);
                    } finally {
                        CurrentRequest::answering($id);
                    }
                },
                $connection->send(...),
                function (int $id): void {
                    $this->lastId = $id;
                    unset($this->naming[$id]);
                },
                function (): void {
                    if ($this->resetHooks !== []) {
                        $this->reset();
                    }
                },
            );
            $this->stopped = true;
        } catch (ProtocolError $e) {
            $this->stopped = true;
            $this->log($e->getMessage());
            try {
                $connection->send(Frame::error($e->getMessage()));
            } catch (ProtocolError) {
                // The server is gone.
            }
            exit(self::EXIT_PROTOCOL);
        }
    }

    /**
     * inSession() for one request at a time; with concurrency, PHP's session and $_COOKIE are
     * the process's, so the handler runs without them, and the headers returned are those the
     * request gave header() and setcookie().
     *
     * @param array<string, mixed> $cookies
     * @param \Closure(): mixed     $handle
     *
     * @return array{mixed, list<array{string, string}>}
     */
    private function session(array $cookies, \Closure $handle): array
    {
        if ($this->concurrency === 1) {
            return self::inSession($cookies, $handle);
        }
        try {
            // An Amp promise, or a generator coroutine (Aerys style), is run to its value.
            $result = Async\Internal\Amp::settle($handle());

            // What PHP's header() and setcookie() gave this request (native runtime).
            return [$result, Async\Internal\Server::headers()];
        } catch (Async\CancelledException $e) {
            throw $e; // the server's CANCEL: the request ends without an answer (Async\Internal\Server)
        } catch (\Throwable $e) {
            return [$e, []];
        }
    }

    /**
     * Streams an answer whose body comes in parts: the RESPONSE frame goes with the first part,
     * each later part in BODY frames, all with FLAG_MORE and FLAG_FLUSH, so the server writes
     * each part to the client at once. Returns the frame that ends the answer, for run() to send.
     * An empty part is a flush: the first one sends the headers before any data. An exception
     * (or a part that is not a string) before the first part becomes a 500 as usual; after it,
     * the status is gone, so the answer ends where it is and the failure is logged, as under
     * PHP-FPM once output has been flushed.
     *
     * @param array<string|int, mixed> $headers
     * @param iterable<mixed>          $parts
     *
     * @throws ProtocolError if the server's pipe fails: the loop ends
     */
    private function stream(int $id, int $status, array $headers, iterable $parts): string
    {
        CurrentRequest::answering($id); // no hints after the RESPONSE frame
        $flags = Frame::FLAG_MORE | Frame::FLAG_FLUSH;
        $begun = false;
        try {
            foreach ($parts as $part) {
                if (!\is_string($part)) {
                    throw new \UnexpectedValueException(sprintf('A streamed response body yielded %s; it must yield strings', get_debug_type($part)));
                }
                $this->connection->send($begun ? Frame::body($id, $part, $flags) : Frame::response($id, $status, $headers, $part, $flags));
                $begun = true;
                $this->server?->room($id); // direct mode: the next part once the client took enough
            }
        } catch (ProtocolError $e) {
            throw $e;
        } catch (\Throwable $e) {
            if (!$begun) {
                return $this->fail($id, Handling::describe($e), $e);
            }
            $this->log('A streamed response was cut short: ' . Handling::describe($e));

            return Frame::body($id, '', 0);
        }
        if (!$begun) {
            try {
                return Frame::response($id, $status, $headers, ''); // nothing was yielded: an empty body
            } catch (\Throwable $e) {
                return $this->fail($id, Handling::describe($e), $e);
            }
        }

        return Frame::body($id, '', 0);
    }

    /**
     * Runs $handle with PHP's session state bracketed per request (Sessions): $_COOKIE is the
     * request's while it runs, so session_start() finds the client's id, and afterwards the
     * session is written, closed and forgotten. Returns what $handle returned or threw, and the
     * headers the session adds to the answer.
     *
     * @param array<string, mixed> $cookies
     * @param \Closure(): mixed     $handle
     *
     * @return array{mixed, list<array{string, string}>}
     */
    private static function inSession(array $cookies, \Closure $handle): array
    {
        $saved = $_COOKIE;
        $_COOKIE = $cookies;
        Sessions::begin($cookies);
        try {
            $result = $handle();
        } catch (\Throwable $e) {
            $result = $e;
        } finally {
            try {
                $headers = Sessions::end();
            } catch (\Throwable $e) {
                $result = $e;
                $headers = [];
            }
            $_COOKIE = $saved;
        }

        return [$result, $headers];
    }

    /**
     * The header() and setcookie() pairs of a concurrent request whose names its response does
     * not set: a header of the response replaces them, as it replaces header()'s on the native
     * runtime with one request at a time (NativeServer::send()).
     *
     * @param list<array{string, string}> $pairs
     * @param \Closure(string): bool      $set   whether the response sets a header of that name
     *
     * @return list<array{string, string}>
     */
    private static function unlessSet(array $pairs, \Closure $set): array
    {
        return $pairs === [] ? [] : array_values(array_filter($pairs, static fn (array $pair): bool => !$set($pair[0])));
    }

    /** @param array<string|int, mixed> $headers */
    private static function sets(array $headers, string $name): bool
    {
        foreach ($headers as $key => $_) {
            if (strcasecmp((string) $key, $name) === 0) {
                return true;
            }
        }

        return false;
    }

    /**
     * Adds header pairs to a header map.
     *
     * @param array<string|int, mixed>     $headers
     * @param list<array{string, string}> $extra
     *
     * @return array<string|int, mixed>
     */
    private static function withHeaders(array $headers, array $extra): array
    {
        foreach ($extra as [$name, $value]) {
            $existing = $headers[$name] ?? [];
            $headers[$name] = [...(\is_array($existing) ? $existing : [$existing]), $value];
        }

        return $headers;
    }

    /**
     * Under workers.debug_leaks (PEREGRINE_DEBUG_LEAKS=1), adds the leak report as the last reset
     * hook: after each request and the application's own hooks, it logs what the request left
     * behind (docs/frameworks.md). The first snapshot is taken here, after the bootstrap.
     */
    private function watchLeaks(): void
    {
        if (getenv('PEREGRINE_DEBUG_LEAKS') === '1') {
            $report = new LeakReport();
            $this->onReset(static function () use ($report): void {
                $report->after();
            });
        }
    }

    private function reset(): void
    {
        foreach ($this->resetHooks as $hook) {
            try {
                $hook();
            } catch (\Throwable $e) {
                $this->log('Reset hook failed: ' . Handling::describe($e));
            }
        }
    }

    /** Reports a failed request, naming it, and returns its 500 response. */
    private function fail(int $id, string $message, ?\Throwable $e = null): string
    {
        $this->log($message . (isset($this->naming[$id]) ? ' (request "' . $this->naming[$id] . '")' : ''));
        $body = 'Internal Server Error';
        if (Handling::debug()) {
            $body .= "\n\n" . ($e ?? $message);
        }

        return Frame::response($id, 500, ['Content-Type' => 'text/plain; charset=utf-8'], $body);
    }

    /** Writes one line to the log, however many lines $message has. */
    private function log(string $message): void
    {
        @fwrite($this->log, strtr($message, ["\r\n" => ' ', "\n" => ' ', "\r" => ' ']) . "\n");
    }

    private function serverParams(): ServerParams
    {
        return ServerParams::ofThisProcess();
    }
}
