<?php

declare(strict_types=1);

namespace Peregrine\Http;

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
    return Superglobals::input();
}

/**
 * Sets a response header in Worker::serveGlobals(), with the semantics of PHP's header():
 * "Name: value" replaces earlier headers of that name unless $replace is false;
 * "HTTP/1.1 404 Not Found" sets the status; "Location:" implies 302 (303 after a non-GET
 * HTTP/1.1 request) unless the status is already 201 or 3xx; "WWW-Authenticate:" implies 401;
 * a non-zero $response_code sets the status.
 *
 * PHP's own header() cannot be used there: under the CLI SAPI it records nothing.
 */
function header(string $header, bool $replace = true, int $response_code = 0): void
{
    Superglobals::header($header, $replace, $response_code);
}

/** Removes the response header $name, or all of them: PHP's header_remove(). */
function header_remove(?string $name = null): void
{
    Superglobals::headerRemove($name);
}

/**
 * Returns the response headers set so far, as "Name: value" lines: PHP's headers_list().
 *
 * @return list<string>
 */
function headers_list(): array
{
    return Superglobals::headersList();
}
