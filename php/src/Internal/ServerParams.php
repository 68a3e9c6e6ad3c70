<?php

declare(strict_types=1);

namespace Peregrine\Internal;

use Peregrine\Http\Request;

/**
 * ServerParams builds the $_SERVER array PHP-FPM behind nginx would give a script: the
 * worker's environment plus the CGI variables of the request.
 *
 * @internal
 */
final class ServerParams
{
    /** @var array<string, mixed> */
    private readonly array $base;
    /** SERVER_NAME: http.server_name, passed as PEREGRINE_SERVER_NAME; empty = the local address. */
    private readonly string $serverName;

    /**
     * ServerParams from this process's own $_SERVER, captured now. It lives here, in a class
     * only the cli runtime's loop loads, so that the Worker class never names $_SERVER: under
     * the native runtime PHP then registers it only for code that reads it (auto_globals_jit),
     * which saves about half of a hello world request's instructions.
     */
    public static function ofThisProcess(): self
    {
        return new self($_SERVER, (string) getcwd());
    }

    /**
     * @param array<string, mixed> $server the worker's own $_SERVER, captured once
     */
    public function __construct(array $server, string $documentRoot)
    {
        $this->serverName = (string) ($server['PEREGRINE_SERVER_NAME'] ?? getenv('PEREGRINE_SERVER_NAME'));
        // argv/argc are the CLI's; HTTP_* must only ever describe the request (httpoxy: an
        // HTTP_PROXY of the daemon's environment stays in getenv(), where CLI tools expect it).
        unset($server['argv'], $server['argc'], $server['PATH_TRANSLATED']);
        foreach ($server as $key => $_) {
            if (str_starts_with((string) $key, 'HTTP_')) {
                unset($server[$key]);
            }
        }
        $script = (string) ($server['SCRIPT_FILENAME'] ?? '');
        $script = $script === '' ? '' : (realpath($script) ?: $script);
        $name = $script !== '' && str_starts_with($script, rtrim($documentRoot, '/') . '/')
            ? substr($script, \strlen(rtrim($documentRoot, '/')))
            : '/' . basename($script);
        $server['DOCUMENT_ROOT'] = $documentRoot;
        $server['SCRIPT_FILENAME'] = $script;
        $server['SCRIPT_NAME'] = $name;
        $server['PHP_SELF'] = $name;
        $server['GATEWAY_INTERFACE'] = 'CGI/1.1';
        $server['SERVER_SOFTWARE'] = 'peregrine';
        $this->base = $server;
    }

    /** @return array<string, mixed> */
    public function build(Request $request, float $time): array
    {
        $server = $this->base;
        $server['REQUEST_METHOD'] = $request->method;
        $server['REQUEST_URI'] = $request->uri;
        $server['QUERY_STRING'] = $request->query;
        $server['SERVER_PROTOCOL'] = $request->protocol;
        $server['REQUEST_SCHEME'] = $request->scheme;
        if ($request->scheme === 'https') {
            $server['HTTPS'] = 'on';
        }
        // nginx passes its configured server_name, never the client's Host header.
        $server['SERVER_NAME'] = $this->serverName !== '' ? $this->serverName : $request->serverAddr;
        $server['SERVER_ADDR'] = $request->serverAddr;
        $server['SERVER_PORT'] = (string) $request->serverPort;
        $server['REMOTE_ADDR'] = $request->remoteAddr;
        $server['REMOTE_PORT'] = (string) $request->remotePort;
        $server['REQUEST_TIME_FLOAT'] = $time;
        $server['REQUEST_TIME'] = (int) $time;
        // nginx's fastcgi_params always pass these two, empty when the header is absent.
        $server['CONTENT_TYPE'] = $request->headers['content-type'][0] ?? '';
        $server['CONTENT_LENGTH'] = $request->headers['content-length'][0] ?? '';
        foreach ($request->headers as $name => $values) {
            // An all-digit name ("123") is an integer key.
            $name = (string) $name;
            // Like nginx and Apache, drop names with "_": "X_Forwarded_For" would pose as
            // "X-Forwarded-For" once both are HTTP_X_FORWARDED_FOR. And never HTTP_PROXY
            // (httpoxy): HTTP clients take it for the proxy to use, as PHP-FPM does not.
            if (str_contains($name, '_') || $name === 'proxy') {
                continue;
            }
            $server['HTTP_' . strtoupper(strtr($name, '-', '_'))] = isset($values[1])
                ? implode($name === 'cookie' ? '; ' : ', ', $values)
                : $values[0];
        }
        if (isset($request->headers['authorization'])) {
            self::authorization($request->headers['authorization'][0], $server);
        }

        return $server;
    }

    /**
     * Sets PHP_AUTH_USER, PHP_AUTH_PW, PHP_AUTH_DIGEST and AUTH_TYPE as PHP does.
     *
     * @param array<string, mixed> $server
     */
    private static function authorization(string $value, array &$server): void
    {
        if (strncasecmp($value, 'Basic ', 6) === 0) {
            $credentials = base64_decode(substr($value, 6), true);
            if ($credentials !== false && str_contains($credentials, ':')) {
                [$server['PHP_AUTH_USER'], $server['PHP_AUTH_PW']] = explode(':', $credentials, 2);
                $server['AUTH_TYPE'] = 'Basic';
            }
        } elseif (strncasecmp($value, 'Digest ', 7) === 0) {
            $server['PHP_AUTH_DIGEST'] = substr($value, 7);
            $server['AUTH_TYPE'] = 'Digest';
        }
    }
}
