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
        $host = $_SERVER['HTTP_HOST'] ?? (($_SERVER['SERVER_ADDR'] ?? '') . ':' . ($_SERVER['SERVER_PORT'] ?? ''));
        $psr = $factory->createServerRequest($method, self::scheme() . '://' . $host . ($_SERVER['REQUEST_URI'] ?? '/'), $_SERVER)
            ->withProtocolVersion(str_starts_with($protocol, 'HTTP/') ? substr($protocol, 5) : $protocol);
        foreach (\peregrine_request_headers() as $name => $values) {
            $psr = $psr->withHeader((string) $name, $values);
        }
        $multipart = self::isMultipart();
        if (!$multipart) {
            // A copy, not a php://input stream: the request outlives the body PHP holds.
            $body = (string) file_get_contents('php://input');
            if ($body !== '') {
                $psr = $psr->withBody($factory->createStream($body));
            }
        }
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
