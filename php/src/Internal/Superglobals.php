<?php

declare(strict_types=1);

namespace Peregrine\Internal;

use Peregrine\Http\Request;
use Peregrine\Http\Response;

/**
 * Superglobals runs a script written for PHP-FPM: it fills $_SERVER, $_GET, $_POST, $_COOKIE,
 * $_FILES and $_REQUEST from the request, captures what the script echoes, takes the status from
 * http_response_code() and the headers from Peregrine\Http\header(), then puts the superglobals
 * back as they were.
 *
 * Under the CLI SAPI PHP's own header() records nothing (headers_list() stays empty), so the
 * script's headers can only come from Peregrine\Http\header(); its status effects
 * ("HTTP/1.1 404", "Location") do reach http_response_code() as long as nothing was written to
 * the real STDOUT. A "Status: 403 Forbidden" header sets the status as it does through PHP-FPM
 * and nginx.
 *
 * Output goes through OutputCapture (ob_clean() and friends discard as under FPM) and PHP
 * sessions through Sessions: each request reads its own session cookie, a new session sends
 * its Set-Cookie, and nothing of one request's session is left for the next.
 *
 * @internal
 */
final class Superglobals
{
    // The state of the current request, read by the functions in Http/functions.php.
    /** @var list<array{string, string, string}> lower-case name, name, value */
    private static array $headers = [];
    private static bool $defaultType = true;
    private static string $input = '';
    private static bool $stuck = false;

    public function __construct(private readonly ServerParams $server)
    {
    }

    /**
     * Runs $script for $request and returns what it produced.
     *
     * @throws \Throwable whatever the script throws; the superglobals are restored first
     */
    public function run(Request $request, callable $script): Response
    {
        $saved = [$_SERVER, $_GET, $_POST, $_COOKIE, $_FILES, $_REQUEST];
        self::$headers = [];
        self::$defaultType = true;
        self::$input = $request->body;
        http_response_code(200);

        $_SERVER = $this->server->build($request, microtime(true));
        $_GET = $request->queryParams;
        // PHP reads form bodies and uploads for POST only.
        $post = $request->method === 'POST';
        $_POST = $post ? ($request->parsedBody ?? []) : [];
        $_COOKIE = $request->cookies;
        $_FILES = $post && $request->files !== [] ? Uploads::phpFiles($request->files) : [];
        $_REQUEST = $_POST === [] ? $_GET : array_replace_recursive($_GET, $_POST);

        Sessions::begin($_COOKIE);
        $output = new OutputCapture();
        $output->start();
        try {
            $script();
        } finally {
            try {
                // PHP writes the session at the end of the request, after the script's output.
                foreach (Sessions::end() as [$name, $value]) {
                    $lower = strtolower($name);
                    if ($lower === 'set-cookie' || !self::has($lower)) {
                        self::$headers[] = [$lower, $name, $value];
                    }
                }
            } finally {
                $body = $output->finish();
                self::$stuck = self::$stuck || $output->stuck();
                [$_SERVER, $_GET, $_POST, $_COOKIE, $_FILES, $_REQUEST] = $saved;
                $recorded = self::$headers;
                self::$headers = [];
                self::$input = '';
            }
        }

        $status = http_response_code();
        $status = \is_int($status) ? $status : 200;
        $headers = [];
        $cgiStatus = false;
        foreach ($recorded as [$lower, $name, $value]) {
            if ($lower === 'status') {
                // PHP-FPM passes "Status: 403 Forbidden" on, and nginx answers with it: the
                // first one wins over http_response_code(), and the client never sees the header.
                if (!$cgiStatus && preg_match('/^[1-9][0-9][0-9](?:\s|$)/', $value) === 1) {
                    $status = (int) $value;
                    $cgiStatus = true;
                }
                continue;
            }
            $headers[$name][] = $value;
        }
        if ($status < 100 || $status > 999) {
            // http_response_code() takes any int; no answer can carry this one. nginx answers
            // 502 when PHP-FPM passes such a status on, and so does the native runtime.
            file_put_contents('php://stderr', "peregrine: the script set the HTTP status $status, outside 100..999: answering 502\n");

            return new Response(502, [], '');
        }
        if (self::$defaultType && !isset($headers['Content-type'])) {
            $type = self::defaultType();
            if ($type !== '') {
                $headers['Content-type'] = [$type];
            }
        }

        return new Response($status, $headers, $body);
    }

    /**
     * Whether a script left an output buffer that PHP cannot close (ob_start() without
     * PHP_OUTPUT_HANDLER_REMOVABLE) in this worker: it stays for the worker's life, and the
     * worker should be replaced.
     */
    public static function stuck(): bool
    {
        return self::$stuck;
    }

    /** The body of the current request, for Peregrine\Http\input(). */
    public static function input(): string
    {
        return self::$input;
    }

    /** PHP's header(), recording into the current response. */
    public static function header(string $header, bool $replace, int $responseCode): void
    {
        $line = rtrim($header, " \t\n\r\v\f");
        if (strpbrk($line, "\r\n") !== false) {
            trigger_error('Header may not contain more than a single header, new line detected', E_USER_WARNING);

            return;
        }
        if (str_contains($line, "\0")) {
            trigger_error('Header may not contain NUL bytes', E_USER_WARNING);

            return;
        }
        if (strncasecmp($line, 'HTTP/', 5) === 0) {
            // "HTTP/1.1 404 Not Found": like PHP, the digits after the first space set the status,
            // and $responseCode is ignored.
            $space = strpos($line, ' ');
            $code = $space === false ? 0 : (int) substr($line, $space + 1);
            if ($code >= 100 && $code <= 999) {
                http_response_code($code);
            }

            return;
        }
        $colon = strpos($line, ':');
        if ($colon === false) {
            // PHP would send the line as it is; no HTTP server can, so it is dropped.
            if ($responseCode !== 0) {
                http_response_code($responseCode);
            }

            return;
        }
        $name = rtrim(substr($line, 0, $colon));
        $value = ltrim(substr($line, $colon + 1), " \t");
        $lower = strtolower($name);
        if ($lower === 'content-type') {
            if ($replace) {
                self::$defaultType = false;
            }
            if ($value === '') {
                // header('Content-Type:') is how PHP code asks for no Content-Type at all.
                self::remove($lower);

                return;
            }
            $name = 'Content-type';
            $value = self::withCharset($value);
        } elseif ($lower === 'location') {
            $status = (int) http_response_code();
            if (($status < 300 || $status > 399) && $status !== 201) {
                // 302 whatever the method: PHP would answer 303 after a POST over HTTP/1.1, but
                // PHP-FPM tells PHP every request is HTTP/1.0 (proto_num 1000).
                http_response_code($responseCode !== 0 ? $responseCode : 302);
            }
        } elseif ($lower === 'www-authenticate') {
            http_response_code(401);
        }
        if ($responseCode !== 0) {
            http_response_code($responseCode);
        }
        if ($replace) {
            self::remove($lower);
        }
        self::$headers[] = [$lower, $name, $value];
    }

    /** PHP's header_remove(). */
    public static function headerRemove(?string $name): void
    {
        if ($name === null) {
            self::$headers = [];

            return;
        }
        if (str_contains($name, ':')) {
            trigger_error('Header to delete may not contain colon.', E_USER_WARNING);

            return;
        }
        $lower = strtolower(trim($name));
        if ($lower === 'content-type') {
            self::$defaultType = false;
        }
        self::remove($lower);
    }

    /**
     * PHP's headers_list().
     *
     * @return list<string>
     */
    public static function headersList(): array
    {
        $lines = [];
        foreach (self::$headers as [, $name, $value]) {
            $lines[] = "$name: $value";
        }

        return $lines;
    }

    private static function has(string $lower): bool
    {
        foreach (self::$headers as [$name]) {
            if ($name === $lower) {
                return true;
            }
        }

        return false;
    }

    private static function remove(string $lower): void
    {
        foreach (self::$headers as $i => [$name]) {
            if ($name === $lower) {
                unset(self::$headers[$i]);
            }
        }
        self::$headers = array_values(self::$headers);
    }

    /** Appends ";charset=" default_charset to a text/ type without one, as PHP does. */
    private static function withCharset(string $type): string
    {
        $charset = (string) ini_get('default_charset');
        if ($charset === '' || !str_starts_with($type, 'text/') || str_contains($type, 'charset=')) {
            return $type;
        }

        return $type . ';charset=' . $charset;
    }

    /** The Content-Type PHP sends when the script sets none: "text/html; charset=UTF-8". */
    private static function defaultType(): string
    {
        $type = (string) ini_get('default_mimetype');
        $charset = (string) ini_get('default_charset');
        if ($type === '' || $charset === '' || !str_starts_with($type, 'text/')) {
            return $type;
        }

        return $type . '; charset=' . $charset;
    }
}
