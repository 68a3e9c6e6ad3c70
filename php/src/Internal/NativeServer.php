<?php

declare(strict_types=1);

namespace Peregrine\Internal;

use Peregrine\Http\Request;
use Peregrine\Http\Response;
use Peregrine\Http\UploadedFile;
use Psr\Http\Message\ResponseInterface;
use Psr\Http\Message\ServerRequestFactoryInterface;
use Psr\Http\Message\StreamFactoryInterface;
use Psr\Http\Message\UploadedFileFactoryInterface;

/**
 * NativeServer serves Worker's three modes under the native runtime (bin/peregrine-php,
 * native/README.md), where PHP itself runs as the server's SAPI: the superglobals, php://input,
 * header(), setcookie(), sessions, uploads and exit() are PHP's own, as under PHP-FPM.
 *
 * Each serve method loops on peregrine_handle_request(), which blocks for the next request,
 * sets PHP's per-request state up, calls the closure it is given, sends the status, headers and
 * output PHP collected, and resets the state; it returns false when the server says stop.
 *
 *     serve*() --> peregrine_handle_request(fn) --true--> reset hooks --+
 *                    ^                                                   |
 *                    +---------------------------------------------------+
 *                  false (STOP or end of input): serve*() returns
 *
 * serve() and servePsr() answer an exception with a 500 as the CLI runtime does, and send what
 * the handler echoes to the log rather than to the client. serveGlobals() leaves both to PHP,
 * as PHP-FPM would: output is the body, an uncaught exception a fatal error and a 500.
 *
 * Two steps of serve() are native (native/nativeserver.c), where PHP spent most of a request:
 * peregrine_request_object() builds the Request as Request::fromFrame() would, and
 * peregrine_answer() sends a status, headers and body as header() for each value,
 * http_response_code() and echo would (the headers were checked by Response's constructor or
 * HeaderCheck: a name is a token, so "$name: " cannot make a header of another name, and a
 * value has no line break).
 *
 * @internal
 */
final class NativeServer
{
    /** @var list<callable> */
    private array $resetHooks = [];

    /**
     * Adds a hook that runs after every request, once its answer is sent, whatever the handler
     * returned or threw. A hook that throws is logged; the worker goes on.
     */
    public function onReset(callable $hook): self
    {
        $this->resetHooks[] = $hook;

        return $this;
    }

    /** @param callable(Request): Response $handler */
    public function serve(callable $handler): void
    {
        // Made once: a closure made in the loop would be made again for every request.
        $call = static fn (): mixed => $handler(\peregrine_request_object() ?? self::request());
        $this->loop(function () use ($call): void {
            $response = $this->call($call);
            if ($response instanceof Response && \is_string($response->body)) {
                \peregrine_answer($response->status, $response->headers, $response->body);
            } elseif ($response instanceof Response) {
                \peregrine_answer($response->status, $response->headers, '');
                $this->stream($response->body);
            } elseif (!$response instanceof \Throwable) {
                $this->fail('The handler returned ' . get_debug_type($response) . ', not a ' . Response::class);
            }
        });
    }

    /**
     * Serves with PSR-7 messages: $handler is a PSR-15 handler, an object with
     * handle(ServerRequestInterface), or a callable; $factory implements the PSR-17 server
     * request, stream and uploaded file factories.
     *
     * @throws \InvalidArgumentException if $handler or $factory is unusable; nothing is served then
     */
    public function servePsr(callable|object $handler, object $factory): void
    {
        foreach ([ServerRequestFactoryInterface::class, StreamFactoryInterface::class, UploadedFileFactoryInterface::class] as $interface) {
            if (!$factory instanceof $interface) {
                throw new \InvalidArgumentException(sprintf('The factory given to servePsr() must implement %s; %s does not',
                    $interface, $factory::class));
            }
        }
        /** @var ServerRequestFactoryInterface&StreamFactoryInterface&UploadedFileFactoryInterface $factory */
        $handle = Handling::psrHandler($handler);
        $call = static fn (): mixed => $handle(NativePsrRequest::build($factory));
        $this->loop(function () use ($call): void {
            $response = $this->call($call);
            if ($response instanceof ResponseInterface) {
                $body = $response->getBody();
                try {
                    HeaderCheck::all($response->getHeaders()); // PSR-7 implementations need not check
                } catch (\InvalidArgumentException $e) {
                    $this->fail(Handling::describe($e), $e);

                    return;
                }
                \peregrine_answer($response->getStatusCode(), $response->getHeaders(), '');
                $parts = PsrBridge::parts($response);
                if ($parts !== null) {
                    $this->stream($parts); // not seekable: streamed as it is read
                } else {
                    $body->rewind();
                    while (!$body->eof()) {
                        echo $body->read(1 << 20);
                    }
                }
            } elseif (!$response instanceof \Throwable) {
                $this->fail('The handler returned ' . get_debug_type($response) . ', not a ' . ResponseInterface::class);
            }
        });
    }

    /**
     * Runs a script written for PHP-FPM: the superglobals, header(), php://input and the output
     * are PHP's own, so $script needs nothing from Peregrine.
     */
    public function serveGlobals(callable $script): void
    {
        $this->loop(static function () use ($script): void {
            $script();
        });
    }

    private function loop(\Closure $request): void
    {
        while (\peregrine_handle_request($request)) {
            foreach ($this->resetHooks as $hook) {
                try {
                    $hook();
                } catch (\Throwable $e) {
                    self::log('Reset hook failed: ' . Handling::describe($e));
                }
            }
        }
    }

    /**
     * Calls $handler with its output diverted to the log, as the CLI runtime does; returns what
     * it returned, or the Throwable it threw, answered with a 500.
     */
    private function call(\Closure $handler): mixed
    {
        $level = ob_get_level();
        ob_start();
        try {
            $result = $handler();
        } catch (\Throwable $e) {
            $result = $e;
        }
        self::divert($level);
        if ($result instanceof \Throwable) {
            $this->fail(Handling::describe($result), $result);
        }

        return $result;
    }

    /**
     * Streams a body that comes in parts (a Response's iterable, a PSR-7 stream that is not
     * seekable): each part is output and flushed, so the server sends it at once. What the
     * body's code echoes meanwhile goes to the log, as in call(). A failure before the first
     * part answers 500; after it the answer is cut short and the failure logged.
     *
     * @param iterable<mixed> $parts
     */
    private function stream(iterable $parts): void
    {
        $level = ob_get_level();
        $begun = false;
        ob_start();
        try {
            foreach ($parts as $part) {
                self::divert($level);
                if (!\is_string($part)) {
                    throw new \UnexpectedValueException(sprintf('A streamed response body yielded %s; it must yield strings', get_debug_type($part)));
                }
                echo $part;
                if ($level > 0) {
                    ob_flush(); // output_buffering's buffer
                }
                flush();
                $begun = true;
                ob_start();
            }
            self::divert($level);
        } catch (\Throwable $e) {
            self::divert($level);
            if (!$begun) {
                $this->fail(Handling::describe($e), $e);

                return;
            }
            self::log('A streamed response was cut short: ' . Handling::describe($e));
        }
    }

    /**
     * Sends what was echoed into the output buffers above $level to the log, and closes them,
     * those the handler opened included: one it opened with ob_start(null, 0, 0), which PHP
     * would not let it close, is made closable first.
     */
    private static function divert(int $level): void
    {
        if (ob_get_level() > $level + 1) { // above call()'s own: the handler's
            \peregrine_output_removable($level);
        }
        $stray = '';
        while (ob_get_level() > $level) {
            $stray = ob_get_clean() . $stray;
        }
        if ($stray !== '') {
            file_put_contents('php://stderr', $stray);
        }
    }

    /**
     * Builds the Request: peregrine_request_object() (native/nativeserver.c) builds it from the
     * request's fields and headers as Request::fromFrame() would, and leaves a multipart request
     * or one with uploads, which take $_POST and $_FILES, to this method. This file must not name
     * the server superglobal: the runtime creates it for a request only once code that names it
     * was compiled (native/worker.c), and a raw worker seldom needs it. The PSR-7 path, which
     * passes it on, is NativePsrRequest.
     */
    private static function request(): Request
    {
        // The fields as the server superglobal has them, a repeated header as several values
        // (getallheaders() has them as nginx passes them to FPM: joined, some dropped). An
        // all-digit name is an integer key, as on the cli runtime.
        [$fields, $headers] = \peregrine_request();
        $method = $fields[0];
        $multipart = stripos($fields[11], 'multipart/form-data') === 0;
        // A GET or HEAD without a Content-Length has no body (the server states the length of
        // every body it passes).
        $length = $fields[12];
        $hasBody = !$multipart && $length !== '0' && ($length !== '' || ($method !== 'GET' && $method !== 'HEAD'));

        return new Request(
            method: $method,
            uri: $fields[1],
            headers: $headers,
            body: $hasBody ? (string) file_get_contents('php://input') : '',
            queryParams: $_GET,
            cookies: $_COOKIE,
            parsedBody: $method === 'POST' && ($multipart || stripos($fields[11], 'application/x-www-form-urlencoded') === 0) ? $_POST : null,
            files: $_FILES === [] ? [] : self::files($_FILES),
            remoteAddr: $fields[5],
            remotePort: (int) $fields[6],
            serverAddr: $fields[7],
            serverPort: (int) $fields[8],
            scheme: $fields[9],
            protocol: $fields[4],
        );
    }

    /** Logs the failure, naming the request, and answers 500, with the trace when debugging. */
    private function fail(string $message, ?\Throwable $e = null): void
    {
        [$fields] = \peregrine_request();
        self::log($message . ' (request "' . $fields[0] . ' ' . $fields[1] . '")');
        header_remove();
        $body = 'Internal Server Error';
        if (Handling::debug()) {
            $body .= "\n\n" . ($e ?? $message);
        }
        \peregrine_answer(500, ['Content-Type' => 'text/plain; charset=utf-8'], $body);
    }

    /**
     * $_FILES as UploadedFile objects nested like the field names.
     *
     * @param array<string, mixed> $files
     *
     * @return array<string, mixed>
     */
    public static function files(array $files): array
    {
        $tree = [];
        foreach ($files as $field => $f) {
            $tree[$field] = self::fileNode($f['name'], $f['type'], $f['size'], $f['error'], $f['tmp_name']);
        }

        return $tree;
    }

    private static function fileNode(mixed $name, mixed $type, mixed $size, mixed $error, mixed $tmp): UploadedFile|array
    {
        if (!\is_array($name)) {
            return new UploadedFile((string) $name, (string) $type, (int) $size, (int) $error, (string) $tmp);
        }
        $node = [];
        foreach ($name as $key => $n) {
            $node[$key] = self::fileNode($n, $type[$key] ?? '', $size[$key] ?? 0, $error[$key] ?? UPLOAD_ERR_NO_FILE, $tmp[$key] ?? '');
        }

        return $node;
    }

    private static function log(string $message): void
    {
        error_log(strtr($message, ["\r\n" => ' ', "\n" => ' ', "\r" => ' ']));
    }
}
