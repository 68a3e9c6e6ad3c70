<?php

declare(strict_types=1);

namespace Peregrine;

use Peregrine\Http\Response;
use Peregrine\Internal\Connection;
use Peregrine\Internal\Frame;
use Peregrine\Internal\ProtocolError;
use Peregrine\Internal\PsrBridge;
use Peregrine\Internal\RequestDecoder;
use Peregrine\Internal\ServerParams;
use Peregrine\Internal\Superglobals;
use Psr\Http\Message\ResponseInterface;
use Psr\Http\Server\RequestHandlerInterface;

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
 */
final class Worker
{
    /** Exit status after a protocol error (EX_SOFTWARE). */
    private const EXIT_PROTOCOL = 70;

    /** @var list<callable> */
    private array $resetHooks = [];

    /**
     * @param resource $log where failures are reported
     */
    private function __construct(
        private readonly Connection $connection,
        private readonly mixed $log,
    ) {
    }

    /**
     * Connects to the server that started this process.
     *
     * @throws \RuntimeException if the process was not started by the peregrine server
     */
    public static function create(): self
    {
        if (getenv('PEREGRINE_PROTOCOL') !== '1') {
            throw new \RuntimeException('This script must be started by the peregrine server, e.g. '
                . '`peregrine serve worker.php`: PEREGRINE_PROTOCOL=1 is not set in its environment.');
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
        $this->resetHooks[] = $hook;

        return $this;
    }

    /**
     * Serves requests until the server says stop: each one goes to $handler(Request): Response.
     *
     * @param callable(Http\Request): Response $handler
     */
    public function serve(callable $handler): void
    {
        $this->run(function (int $id, string $payload) use ($handler): string {
            $request = RequestDecoder::decode($payload);
            try {
                $response = $handler($request);
                if ($response instanceof Response) {
                    return Frame::response($id, $response->status, $response->headers, $response->body);
                }

                return $this->fail($id, 'The handler returned ' . get_debug_type($response) . ', not a ' . Response::class);
            } catch (\Throwable $e) {
                return $this->fail($id, self::describe($e), $e);
            }
        });
    }

    /**
     * Serves requests with PSR-7 messages: $handler is a PSR-15 request handler, or any object
     * with handle(ServerRequestInterface): ResponseInterface, or a callable taking a
     * ServerRequestInterface and returning a ResponseInterface. $factory implements the PSR-17
     * server request, stream, uploaded file and response factories, e.g. Nyholm's Psr17Factory.
     *
     * @throws \InvalidArgumentException if $handler or $factory is unusable; nothing is served then
     */
    public function servePsr(callable|object $handler, object $factory): void
    {
        $handle = self::psrHandler($handler);
        $bridge = new PsrBridge($factory, $this->serverParams());
        $this->run(function (int $id, string $payload) use ($handle, $bridge): string {
            $request = RequestDecoder::decode($payload);
            try {
                $response = $handle($bridge->request($request));
                if ($response instanceof ResponseInterface) {
                    return $bridge->response($id, $response);
                }

                return $this->fail($id, 'The handler returned ' . get_debug_type($response) . ', not a ' . ResponseInterface::class);
            } catch (\Throwable $e) {
                return $this->fail($id, self::describe($e), $e);
            }
        });
    }

    /**
     * Serves requests with a script written for PHP-FPM: before each call of $script the
     * superglobals describe the request; what it echoes is the body, http_response_code() the
     * status and Peregrine\Http\header() the headers; afterwards the superglobals are restored.
     */
    public function serveGlobals(callable $script): void
    {
        $globals = new Superglobals($this->serverParams());
        $this->run(function (int $id, string $payload) use ($globals, $script): string {
            $request = RequestDecoder::decode($payload);
            try {
                $response = $globals->run($request, $script);

                return Frame::response($id, $response->status, $response->headers, $response->body);
            } catch (\Throwable $e) {
                return $this->fail($id, self::describe($e), $e);
            }
        });
    }

    /**
     * The loop shared by the serve methods. $respond turns a REQUEST payload into a RESPONSE frame.
     *
     * @param \Closure(int, string): string $respond
     */
    private function run(\Closure $respond): void
    {
        $connection = $this->connection;
        try {
            $connection->send(Frame::ready(PHP_VERSION));
            while (($payload = $connection->receive($id)) !== null) {
                // Written at once, before the next request of a batch: a crash loses nothing answered.
                $connection->send($respond($id, $payload));
                if ($this->resetHooks !== []) {
                    $this->reset();
                }
            }
        } catch (ProtocolError $e) {
            $this->log($e->getMessage());
            try {
                $connection->send(Frame::error($e->getMessage()));
            } catch (ProtocolError) {
                // The server is gone; the log line above is all that can be said.
            }
            exit(self::EXIT_PROTOCOL);
        }
    }

    private function reset(): void
    {
        foreach ($this->resetHooks as $hook) {
            try {
                $hook();
            } catch (\Throwable $e) {
                $this->log('Reset hook failed: ' . self::describe($e));
            }
        }
    }

    /** Reports a failed request and returns its 500 response. */
    private function fail(int $id, string $message, ?\Throwable $e = null): string
    {
        $this->log($message);
        $body = 'Internal Server Error';
        if (self::debug()) {
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
        return new ServerParams($_SERVER, (string) getcwd());
    }

    private static function describe(\Throwable $e): string
    {
        return 'Uncaught ' . $e::class . ': ' . $e->getMessage() . ' in ' . $e->getFile() . ':' . $e->getLine();
    }

    /** Whether a 500 response may show the trace: APP_DEBUG is truthy or PEREGRINE_DEBUG is 1. */
    private static function debug(): bool
    {
        if (getenv('PEREGRINE_DEBUG') === '1') {
            return true;
        }
        $value = $_SERVER['APP_DEBUG'] ?? $_ENV['APP_DEBUG'] ?? getenv('APP_DEBUG');

        return \is_scalar($value) && filter_var($value, FILTER_VALIDATE_BOOL);
    }

    /** @return \Closure(\Psr\Http\Message\ServerRequestInterface): mixed */
    private static function psrHandler(callable|object $handler): \Closure
    {
        // A PSR-15 handler, or an object shaped like one when psr/http-server-handler is absent
        // (instanceof an unknown interface is simply false).
        if ($handler instanceof RequestHandlerInterface || (!\is_callable($handler) && method_exists($handler, 'handle'))) {
            return $handler->handle(...);
        }
        if (\is_callable($handler)) {
            return \Closure::fromCallable($handler);
        }
        throw new \InvalidArgumentException(sprintf('servePsr() needs a callable or an object with a handle() method, %s given',
            get_debug_type($handler)));
    }
}
