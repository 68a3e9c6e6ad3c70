<?php

declare(strict_types=1);

namespace Peregrine\Http;

use Peregrine\Internal\Cookies;
use Peregrine\Internal\Uploads;

/**
 * Request is one HTTP request, read-only.
 *
 * $queryParams, $cookies, $parsedBody and $files are parsed on first read, not before: a handler
 * that never looks at them does not pay for them (php/README.md has the measurements).
 *
 * Like any readonly property, these cannot be passed by reference: copy one into a variable
 * before array_walk_recursive() or sort().
 */
final class Request
{
    public readonly string $method;
    /** The request target as sent: "/a/b?x=1". */
    public readonly string $uri;
    /** The uri up to "?", not decoded. */
    public readonly string $path;
    /** The uri after "?", not decoded. */
    public readonly string $query;
    /** @var array<string, mixed> the query string parsed by PHP's rules (parse_str) */
    public readonly array $queryParams;
    /** @var array<string, list<string>> lower-case name => values, in the order received */
    public readonly array $headers;
    /** @var array<string, mixed> the Cookie headers parsed like $_COOKIE */
    public readonly array $cookies;
    /** Empty for multipart/form-data: the server has parsed it into $parsedBody and $files. */
    public readonly string $body;
    /**
     * @var array<string, mixed>|null the fields of an application/x-www-form-urlencoded or
     *                                multipart/form-data body (any method), else null
     */
    public readonly ?array $parsedBody;
    /** @var array<string, mixed> UploadedFile objects nested like their field names: "docs[]", "a[b]" */
    public readonly array $files;
    public readonly string $remoteAddr;
    public readonly int $remotePort;
    /** The address the connection arrived on. */
    public readonly string $serverAddr;
    public readonly int $serverPort;
    /** "http" or "https". */
    public readonly string $scheme;
    /** "HTTP/1.1", "HTTP/2.0"... */
    public readonly string $protocol;

    /** Multipart form fields, url-encoded, as the server sent them. */
    private readonly string $form;
    /** @var list<array{string, string, string, int, int, string}> */
    private readonly array $uploads;

    private static ?self $blank = null;

    /**
     * Builds a request, mostly for tests. Parameters left null are derived: $queryParams from the
     * uri, $cookies from the Cookie headers, $parsedBody from a form-urlencoded body.
     *
     * @param string                                 $uri     the request target as sent: "/a/b?x=1"
     * @param array<string, string|list<string>>     $headers name => value or list of values, any case
     * @param array<string, mixed>|null              $parsedBody
     * @param array<string, mixed>                   $files   UploadedFile objects nested like their field names
     */
    public function __construct(
        string $method = 'GET',
        string $uri = '/',
        array $headers = [],
        string $body = '',
        ?array $queryParams = null,
        ?array $cookies = null,
        ?array $parsedBody = null,
        array $files = [],
        string $remoteAddr = '127.0.0.1',
        int $remotePort = 0,
        string $serverAddr = '127.0.0.1',
        int $serverPort = 80,
        string $scheme = 'http',
        string $protocol = 'HTTP/1.1',
    ) {
        $this->method = $method;
        $this->uri = $uri;
        $this->body = $body;
        $this->remoteAddr = $remoteAddr;
        $this->remotePort = $remotePort;
        $this->serverAddr = $serverAddr;
        $this->serverPort = $serverPort;
        $this->scheme = $scheme;
        $this->protocol = $protocol;
        $q = strpos($uri, '?');
        $this->path = $q === false ? $uri : substr($uri, 0, $q);
        $this->query = $q === false ? '' : substr($uri, $q + 1);
        $normalized = [];
        foreach ($headers as $name => $values) {
            foreach (\is_array($values) ? $values : [$values] as $value) {
                $normalized[strtolower((string) $name)][] = (string) $value;
            }
        }
        $this->headers = $normalized;
        $this->form = '';
        $this->uploads = [];
        $this->files = $files;
        // unset() leaves a readonly property to __get(), which initialises it once.
        if ($queryParams === null) {
            unset($this->queryParams);
        } else {
            $this->queryParams = $queryParams;
        }
        if ($cookies === null) {
            unset($this->cookies);
        } else {
            $this->cookies = $cookies;
        }
        if ($parsedBody === null) {
            unset($this->parsedBody);
        } else {
            $this->parsedBody = $parsedBody;
        }
    }

    /**
     * Builds a request from the fields of a REQUEST frame without the normalisation the public
     * constructor does: the worker loop's fast path.
     *
     * @internal
     *
     * @param list<string>                                            $fields  the head fields, in the order of
     *                                                                         docs/protocol.md
     * @param array<string, list<string>>                             $headers
     * @param list<array{string, string, string, int, int, string}> $uploads
     */
    public static function fromFrame(array $fields, array $headers, string $body, array $uploads): self
    {
        // Cloning a blank instance skips the constructor, which only a user needs.
        $r = clone (self::$blank ??= (new \ReflectionClass(self::class))->newInstanceWithoutConstructor());
        $r->method = $fields[0];
        $r->uri = $fields[1];
        $r->path = $fields[2];
        $r->query = $fields[3];
        $r->protocol = $fields[4];
        $r->remoteAddr = $fields[5];
        $r->remotePort = (int) $fields[6];
        $r->serverAddr = $fields[7];
        $r->serverPort = (int) $fields[8];
        $r->scheme = $fields[9];
        $r->form = $fields[10];
        $r->uploads = $uploads;
        $r->headers = $headers;
        $r->body = $body;
        // Parse lazily only when there is something to parse; the common empty cases cost nothing.
        if ($fields[3] === '') {
            $r->queryParams = [];
        } else {
            unset($r->queryParams);
        }
        if (isset($headers['cookie'])) {
            unset($r->cookies);
        } else {
            $r->cookies = [];
        }
        if (isset($headers['content-type'])) {
            unset($r->parsedBody);
        } else {
            $r->parsedBody = null;
        }
        if ($uploads === []) {
            $r->files = [];
        } else {
            unset($r->files);
        }

        return $r;
    }

    /** Returns the first value of the header $name (any case), or null if it was not sent. */
    public function header(string $name): ?string
    {
        return $this->headers[strtolower($name)][0] ?? null;
    }

    /** Initialises a lazy property on first read. */
    public function __get(string $name): mixed
    {
        switch ($name) {
            case 'queryParams':
                parse_str($this->query, $params);

                return $this->queryParams = $params;
            case 'cookies':
                return $this->cookies = Cookies::parse($this->headers['cookie'] ?? []);
            case 'parsedBody':
                return $this->parsedBody = $this->parseBody();
            case 'files':
                return $this->files = Uploads::tree($this->uploads);
        }
        throw new \Error('Undefined property: ' . self::class . '::$' . $name);
    }

    /**
     * Answers isset() on a lazy property without initialising it: for "??" PHP calls __isset()
     * and then __get(), which must be the only one to initialise.
     */
    public function __isset(string $name): bool
    {
        return match ($name) {
            'queryParams', 'cookies', 'files' => true,
            'parsedBody' => $this->formType() !== '',
            default => false,
        };
    }

    /** @return array<string, mixed>|null */
    private function parseBody(): ?array
    {
        $type = $this->formType();
        if ($type === '') {
            return null;
        }
        // A multipart body was parsed by the server, which sends the fields in the head.
        parse_str($type === 'multipart/form-data' ? $this->form : $this->body, $fields);

        return $fields;
    }

    /** The media type when the body is a form PHP would parse, else ''. */
    private function formType(): string
    {
        $type = $this->headers['content-type'][0] ?? '';
        $semicolon = strpos($type, ';');
        $type = strtolower(trim($semicolon === false ? $type : substr($type, 0, $semicolon)));

        return $type === 'application/x-www-form-urlencoded' || $type === 'multipart/form-data' ? $type : '';
    }
}
