<?php

declare(strict_types=1);

namespace Peregrine\Http;

use Peregrine\Internal\CurrentRequest;
use Peregrine\Internal\HeaderCheck;
use Peregrine\Internal\Superglobals;

// Guarded: Composer's "files" and autoload.php may both load this file.
if (\function_exists(__NAMESPACE__ . '\input')) {
    return;
}

/**
 * Returns the body of the current request: what php://input gives under PHP-FPM. Empty
 * outside Worker::serveGlobals(), and for multipart/form-data (the server has parsed it).
 */
function input(): string
{
    if (\function_exists('peregrine_handle_request')) { // the native runtime: PHP has the body
        return (string) file_get_contents('php://input');
    }

    return Superglobals::input();
}

/**
 * Sets a response header in Worker::serveGlobals(), with the semantics of PHP's header():
 * "Name: value" replaces earlier headers of that name unless $replace is false;
 * "HTTP/1.1 404 Not Found" sets the status; "Location:" implies 302 (after a POST too, as under
 * PHP-FPM) unless the status is already 201 or 3xx; "WWW-Authenticate:" implies 401;
 * a non-zero $response_code sets the status.
 *
 * PHP's own header() cannot be used there: under the CLI SAPI it records nothing.
 */
function header(string $header, bool $replace = true, int $response_code = 0): void
{
    if (\function_exists('peregrine_handle_request')) { // the native runtime: PHP's own works
        \header($header, $replace, $response_code);

        return;
    }
    Superglobals::header($header, $replace, $response_code);
}

/** Removes the response header $name, or all of them: PHP's header_remove(). */
function header_remove(?string $name = null): void
{
    if (\function_exists('peregrine_handle_request')) {
        \header_remove($name);

        return;
    }
    Superglobals::headerRemove($name);
}

/**
 * Returns the response headers set so far, as "Name: value" lines: PHP's headers_list().
 *
 * @return list<string>
 */
function headers_list(): array
{
    return \function_exists('peregrine_handle_request') ? \headers_list() : Superglobals::headersList();
}

/**
 * Sends a 103 Early Hints response with $headers (typically Link: <...>; rel=preload) before
 * the final answer, so that the browser starts fetching what the page needs while PHP builds
 * it. $headers maps a name to a value or a list of values. The server forwards it to HTTP/1.1
 * and HTTP/2 clients, never to HTTP/1.0 ones. Call it while handling a request, before the
 * response is returned (or, under the native runtime, before any output is flushed); elsewhere,
 * and outside Peregrine, it does nothing and returns false. In a concurrent worker
 * (workers.concurrency > 1) the hints go to the request whose fiber calls it (or whose async()
 * fiber does), until that request's answer begins.
 *
 * Under the native runtime one request at a time, it is PHP's own headers_send(103) on exactly
 * these headers: the headers set so far with header() are put aside meanwhile and stay set for
 * the final answer.
 *
 * @param array<string, string|list<string>> $headers
 *
 * @throws \InvalidArgumentException if a header cannot be sent: a name that is not an RFC 9110
 *                                   token, a CR, LF or NUL byte in a value, a value that is not a
 *                                   string or a number
 */
function earlyHints(array $headers): bool
{
    HeaderCheck::all($headers, 'Early hint');
    // The PHP library writes the frames: the cli runtime, and concurrent workers on both.
    if (CurrentRequest::$connection !== null || !\function_exists('peregrine_handle_request')) {
        return CurrentRequest::hints($headers);
    }
    if ($headers === [] || \headers_sent()) {
        return false;
    }
    $code = \http_response_code();
    $kept = \headers_list();
    \header_remove();
    try {
        foreach ($headers as $name => $values) {
            foreach ((array) $values as $value) {
                \header($name . ': ' . $value, false);
            }
        }
        \headers_send(103);
    } finally {
        \header_remove();
        foreach ($kept as $line) {
            \header($line, false);
        }
        if (\is_int($code)) {
            \http_response_code($code);
        }
    }

    return true;
}
