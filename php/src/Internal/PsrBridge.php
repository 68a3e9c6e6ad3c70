<?php

declare(strict_types=1);

namespace Peregrine\Internal;

use Peregrine\Http\Request;
use Peregrine\Http\UploadedFile;
use Psr\Http\Message\ResponseFactoryInterface;
use Psr\Http\Message\ResponseInterface;
use Psr\Http\Message\ServerRequestFactoryInterface;
use Psr\Http\Message\ServerRequestInterface;
use Psr\Http\Message\StreamFactoryInterface;
use Psr\Http\Message\StreamInterface;
use Psr\Http\Message\UploadedFileFactoryInterface;

/**
 * PsrBridge converts a Request to a PSR-7 ServerRequest made with the user's PSR-17 factory,
 * and a PSR-7 Response back to a RESPONSE frame, or, when its body is not seekable, to the parts
 * Worker streams.
 *
 * With Nyholm's Psr17Factory it makes Nyholm's ServerRequest directly (NyholmRequest): no
 * createServerRequest() followed by a clone per header (see php/README.md).
 *
 * @internal
 */
final class PsrBridge
{
    private const FACTORIES = [
        ServerRequestFactoryInterface::class,
        StreamFactoryInterface::class,
        UploadedFileFactoryInterface::class,
        ResponseFactoryInterface::class,
    ];

    /** Bytes asked for by each read of a body that is streamed. */
    private const STREAM_READ = 65536;

    private readonly bool $nyholm;

    /**
     * @throws \InvalidArgumentException if $factory lacks one of the four PSR-17 factories
     */
    public function __construct(
        private readonly object $factory,
        private readonly ServerParams $server,
    ) {
        foreach (self::FACTORIES as $interface) {
            if (!$factory instanceof $interface) {
                throw new \InvalidArgumentException(sprintf('The factory given to servePsr() must implement %s; %s does not',
                    $interface, $factory::class));
            }
        }
        $this->nyholm = NyholmRequest::serves($factory);
    }

    public function request(Request $request): ServerRequestInterface
    {
        $server = $this->server->build($request, microtime(true));
        $version = str_starts_with($request->protocol, 'HTTP/') ? substr($request->protocol, 5) : $request->protocol;
        $uri = self::uri($request);
        if ($this->nyholm) {
            $psr = NyholmRequest::make($request->method, $uri, $request->headers, $request->body, $version, $server);
        } else {
            /** @var ServerRequestFactoryInterface&StreamFactoryInterface $factory */
            $factory = $this->factory;
            $psr = $factory->createServerRequest($request->method, $uri, $server)->withProtocolVersion($version);
            foreach ($request->headers as $name => $values) {
                $psr = $psr->withHeader($name, $values);
            }
            if ($request->body !== '') {
                $psr = $psr->withBody($factory->createStream($request->body));
            }
        }
        // A new request's params are already empty: skip the clones when there is nothing to set.
        if ($request->queryParams !== []) {
            $psr = $psr->withQueryParams($request->queryParams);
        }
        if ($request->cookies !== []) {
            $psr = $psr->withCookieParams($request->cookies);
        }
        if ($request->parsedBody !== null) {
            $psr = $psr->withParsedBody($request->parsedBody);
        }
        if ($request->files !== []) {
            $psr = $psr->withUploadedFiles($this->uploadedFiles($request->files));
        }

        return $psr;
    }

    /**
     * @throws \InvalidArgumentException if the response cannot be carried by the protocol
     */
    public function response(int $id, ResponseInterface $response): string
    {
        return Frame::response($id, $response->getStatusCode(), $response->getHeaders(), (string) $response->getBody());
    }

    /**
     * The parts of a body to stream: null when the body is seekable (sent whole by response()),
     * else a generator of the stream's reads of up to STREAM_READ bytes, which closes the stream
     * once it is read.
     *
     * @return \Generator<int, string>|null
     */
    public static function parts(ResponseInterface $response): ?\Generator
    {
        $body = $response->getBody();

        return $body->isSeekable() ? null : self::read($body);
    }

    /** @return \Generator<int, string> */
    private static function read(StreamInterface $body): \Generator
    {
        try {
            while (!$body->eof()) {
                $part = $body->read(self::STREAM_READ);
                if ($part !== '') {
                    yield $part;
                }
            }
        } finally {
            $body->close();
        }
    }

    /** scheme://host/path?query, the host taken from the Host header. */
    private static function uri(Request $request): string
    {
        $host = $request->headers['host'][0] ?? '';
        if ($host === '') {
            $host = str_contains($request->serverAddr, ':') ? "[{$request->serverAddr}]" : $request->serverAddr;
            $host .= ':' . $request->serverPort;
        }
        if (str_starts_with($request->uri, '/')) {
            return $request->scheme . '://' . $host . $request->uri;
        }
        // An absolute-form target ("http://example.com/x") is a URI already; "*" has no path.
        return str_contains($request->uri, '://') ? $request->uri : $request->scheme . '://' . $host;
    }

    /**
     * @param array<mixed> $files
     *
     * @return array<mixed>
     */
    private function uploadedFiles(array $files): array
    {
        /** @var StreamFactoryInterface&UploadedFileFactoryInterface $factory */
        $factory = $this->factory;
        $converted = [];
        foreach ($files as $key => $file) {
            if (\is_array($file)) {
                $converted[$key] = $this->uploadedFiles($file);
            } elseif ($file instanceof UploadedFile) {
                $stream = $file->error === UPLOAD_ERR_OK ? $factory->createStreamFromFile($file->tmpPath) : $factory->createStream('');
                $converted[$key] = $factory->createUploadedFile($stream, $file->size, $file->error, $file->name, $file->type);
            }
        }

        return $converted;
    }
}
