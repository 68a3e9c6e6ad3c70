<?php

declare(strict_types=1);

namespace Peregrine\Internal;

use Peregrine\Http\UploadedFile;
use Psr\Http\Message\ServerRequestFactoryInterface;
use Psr\Http\Message\ServerRequestInterface;
use Psr\Http\Message\StreamFactoryInterface;
use Psr\Http\Message\UploadedFileFactoryInterface;

/**
 * NativePsrRequest builds the PSR-7 request of NativeServer::servePsr() from PHP's own view of
 * the request under the native runtime. It is apart from NativeServer because it names $_SERVER
 * (the request's server params): the runtime registers $_SERVER for every request once code that
 * names it was compiled (native/worker.c), which a raw worker does not need.
 *
 * @internal
 */
final class NativePsrRequest
{
    /** @param ServerRequestFactoryInterface&StreamFactoryInterface&UploadedFileFactoryInterface $factory */
    public static function build(object $factory): ServerRequestInterface
    {
        $method = $_SERVER['REQUEST_METHOD'] ?? 'GET';
        $protocol = (string) ($_SERVER['SERVER_PROTOCOL'] ?? 'HTTP/1.1');
        $version = str_starts_with($protocol, 'HTTP/') ? substr($protocol, 5) : $protocol;
        $host = $_SERVER['HTTP_HOST'] ?? (($_SERVER['SERVER_ADDR'] ?? '') . ':' . ($_SERVER['SERVER_PORT'] ?? ''));
        $uri = self::scheme() . '://' . $host . ($_SERVER['REQUEST_URI'] ?? '/');
        $multipart = self::isMultipart();
        // A copy, not a php://input stream: the request outlives the body PHP holds. A GET or
        // HEAD without a Content-Length has no body (the server states the length of every body
        // it passes), so php://input need not be opened for most requests.
        $length = (string) ($_SERVER['CONTENT_LENGTH'] ?? '');
        $body = !$multipart && $length !== '0' && ($length !== '' || ($method !== 'GET' && $method !== 'HEAD'))
            ? (string) file_get_contents('php://input') : '';
        if (NyholmRequest::serves($factory)) {
            $psr = NyholmRequest::make($method, $uri, \peregrine_request_headers(), $body, $version, $_SERVER);
        } else {
            $psr = $factory->createServerRequest($method, $uri, $_SERVER)->withProtocolVersion($version);
            foreach (\peregrine_request_headers() as $name => $values) {
                $psr = $psr->withHeader((string) $name, $values);
            }
            if ($body !== '') {
                $psr = $psr->withBody($factory->createStream($body));
            }
        }
        // A new request's params are already empty: skip the clones when there is nothing to set.
        if ($_GET !== []) {
            $psr = $psr->withQueryParams($_GET);
        }
        if ($_COOKIE !== []) {
            $psr = $psr->withCookieParams($_COOKIE);
        }
        if ($method === 'POST' && ($multipart || self::isUrlencoded())) {
            $psr = $psr->withParsedBody($_POST);
        }
        if ($_FILES !== []) {
            $psr = $psr->withUploadedFiles(self::psrFiles($factory, NativeServer::files($_FILES)));
        }

        return $psr;
    }

    /**
     * @param StreamFactoryInterface&UploadedFileFactoryInterface $factory
     * @param array<mixed> $files
     *
     * @return array<mixed>
     */
    private static function psrFiles(object $factory, array $files): array
    {
        $converted = [];
        foreach ($files as $key => $file) {
            if (\is_array($file)) {
                $converted[$key] = self::psrFiles($factory, $file);
            } elseif ($file instanceof UploadedFile) {
                $stream = $file->error === UPLOAD_ERR_OK ? $factory->createStreamFromFile($file->tmpPath) : $factory->createStream('');
                $converted[$key] = $factory->createUploadedFile($stream, $file->size, $file->error, $file->name, $file->type);
            }
        }

        return $converted;
    }

    private static function isMultipart(): bool
    {
        return stripos((string) ($_SERVER['CONTENT_TYPE'] ?? ''), 'multipart/form-data') === 0;
    }

    private static function isUrlencoded(): bool
    {
        return stripos((string) ($_SERVER['CONTENT_TYPE'] ?? ''), 'application/x-www-form-urlencoded') === 0;
    }

    private static function scheme(): string
    {
        $https = (string) ($_SERVER['HTTPS'] ?? '');

        return $https !== '' && strcasecmp($https, 'off') !== 0 ? 'https' : 'http';
    }
}
