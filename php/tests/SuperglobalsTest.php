<?php

declare(strict_types=1);

namespace Peregrine\Tests;

use Peregrine\Internal\Frame;
use Peregrine\Tests\Support\Frames;
use Peregrine\Tests\Support\InMemoryWorker;
use PHPUnit\Framework\TestCase;

use function Peregrine\Http\header;
use function Peregrine\Http\header_remove;
use function Peregrine\Http\headers_list;
use function Peregrine\Http\input;

/**
 * Worker::serveGlobals(): FPM-style scripts, run in this process.
 */
final class SuperglobalsTest extends TestCase
{
    /**
     * Serves $frames with $script and returns the responses.
     *
     * @return list<array{id: int, status: int, headers: list<array{string, string}>, body: string}>
     */
    private static function serve(string $frames, callable $script): array
    {
        $w = new InMemoryWorker($frames);
        $w->worker->serveGlobals($script);

        return $w->responses();
    }

    private static function one(string $frame, callable $script): array
    {
        [$response] = self::serve($frame, $script);

        return $response;
    }

    public function testServerVariablesDescribeTheRequest(): void
    {
        $server = [];
        $before = microtime(true);
        self::one(Frames::request(1, 'POST', '/path/x?a=1&b[]=2', [
            ['host', 'example.com:8443'],
            ['content-type', 'application/json'],
            ['content-length', '2'],
            ['accept', 'text/html'],
            ['accept', 'application/json'],
            ['cookie', 'a=1'],
            ['cookie', 'b=2'],
            ['x_spoofed', 'dropped'],
            ['authorization', 'Basic ' . base64_encode('ann:s3cr:et')],
        ], '{}', scheme: 'https'), function () use (&$server): void {
            $server = $_SERVER;
        });

        $this->assertSame('POST', $server['REQUEST_METHOD']);
        $this->assertSame('/path/x?a=1&b[]=2', $server['REQUEST_URI']);
        $this->assertSame('a=1&b[]=2', $server['QUERY_STRING']);
        $this->assertSame('HTTP/1.1', $server['SERVER_PROTOCOL']);
        $this->assertSame('127.0.0.1', $server['SERVER_NAME'], 'the local address, never the client\'s Host (docs/security.md)');
        $this->assertSame('8080', $server['SERVER_PORT']);
        $this->assertSame('127.0.0.1', $server['SERVER_ADDR']);
        $this->assertSame('192.0.2.7', $server['REMOTE_ADDR']);
        $this->assertSame('40000', $server['REMOTE_PORT']);
        $this->assertSame('on', $server['HTTPS']);
        $this->assertSame('https', $server['REQUEST_SCHEME']);
        $this->assertSame('application/json', $server['CONTENT_TYPE']);
        $this->assertSame('2', $server['CONTENT_LENGTH']);
        $this->assertSame('example.com:8443', $server['HTTP_HOST']);
        $this->assertSame('text/html, application/json', $server['HTTP_ACCEPT']);
        $this->assertSame('a=1; b=2', $server['HTTP_COOKIE']);
        $this->assertSame('application/json', $server['HTTP_CONTENT_TYPE']);
        $this->assertArrayNotHasKey('HTTP_X_SPOOFED', $server, 'names with "_" are dropped, as nginx does');
        $this->assertSame('ann', $server['PHP_AUTH_USER']);
        $this->assertSame('s3cr:et', $server['PHP_AUTH_PW']);
        $this->assertSame('Basic', $server['AUTH_TYPE']);
        $this->assertSame(getcwd(), $server['DOCUMENT_ROOT']);
        $this->assertSame(realpath($_SERVER['SCRIPT_FILENAME']), $server['SCRIPT_FILENAME']);
        $this->assertStringEndsWith('/' . basename($_SERVER['SCRIPT_FILENAME']), $server['SCRIPT_NAME']);
        $this->assertSame($server['SCRIPT_NAME'], $server['PHP_SELF']);
        $this->assertIsFloat($server['REQUEST_TIME_FLOAT']);
        $this->assertGreaterThanOrEqual($before, $server['REQUEST_TIME_FLOAT']);
        $this->assertSame((int) $server['REQUEST_TIME_FLOAT'], $server['REQUEST_TIME']);
        $this->assertArrayNotHasKey('argv', $server);
        $this->assertArrayNotHasKey('argc', $server);
        $this->assertSame($_SERVER['PATH'] ?? null, $server['PATH'] ?? null, 'the environment stays');
    }

    public function testPlainHttpHasNoHttpsAndEmptyContentVariables(): void
    {
        $server = [];
        self::one(Frames::get(1, '/'), function () use (&$server): void {
            $server = $_SERVER;
        });

        $this->assertArrayNotHasKey('HTTPS', $server);
        $this->assertSame('', $server['CONTENT_TYPE']);
        $this->assertSame('', $server['CONTENT_LENGTH']);
        $this->assertSame('127.0.0.1', $server['SERVER_NAME']);
    }

    public function testFormSuperglobals(): void
    {
        $seen = [];
        self::one(Frames::request(1, 'POST', '/?a=get&g[]=1&shared=get', [
            ['content-type', 'application/x-www-form-urlencoded'],
            ['cookie', 'sid=abc%2B; theme=dark'],
        ], 'p=post&shared=post&g[]=2'), function () use (&$seen): void {
            $seen = [$_GET, $_POST, $_COOKIE, $_REQUEST, $_FILES, input()];
        });

        [$get, $post, $cookie, $request, $files, $input] = $seen;
        $this->assertSame(['a' => 'get', 'g' => ['1'], 'shared' => 'get'], $get);
        $this->assertSame(['p' => 'post', 'shared' => 'post', 'g' => ['2']], $post);
        $this->assertSame(['sid' => 'abc+', 'theme' => 'dark'], $cookie);
        $this->assertSame(['a' => 'get', 'g' => ['2'], 'shared' => 'post', 'p' => 'post'], $request, 'GET then POST, merged like PHP');
        $this->assertSame([], $files);
        $this->assertSame('p=post&shared=post&g[]=2', $input);
        $this->assertSame('', input(), 'no request, no input');
    }

    public function testPostVariablesOnlyForPost(): void
    {
        $post = null;
        self::one(Frames::request(1, 'PUT', '/', [['content-type', 'application/x-www-form-urlencoded']], 'a=1'), function () use (&$post): void {
            $post = [$_POST, input()];
        });

        $this->assertSame([[], 'a=1'], $post);
    }

    public function testFilesUsePhpsLayout(): void
    {
        $files = null;
        self::one(Frames::request(1, 'POST', '/', [['content-type', 'multipart/form-data; boundary=x']], '', 'title=t', [
            ['avatar', 'me.png', 'image/png', 12, UPLOAD_ERR_OK, '/tmp/a'],
            ['docs[]', 'a.pdf', 'application/pdf', 10, UPLOAD_ERR_OK, '/tmp/b'],
            ['docs[]', '', '', 0, UPLOAD_ERR_NO_FILE, ''],
            ['a[b][c]', 'deep.txt', 'text/plain', 3, UPLOAD_ERR_OK, '/tmp/c'],
        ]), function () use (&$files): void {
            $files = [$_FILES, $_POST];
        });

        $this->assertSame([
            'avatar' => ['name' => 'me.png', 'full_path' => 'me.png', 'type' => 'image/png', 'tmp_name' => '/tmp/a', 'error' => 0, 'size' => 12],
            'docs' => [
                'name' => ['a.pdf', ''],
                'full_path' => ['a.pdf', ''],
                'type' => ['application/pdf', ''],
                'tmp_name' => ['/tmp/b', ''],
                'error' => [0, UPLOAD_ERR_NO_FILE],
                'size' => [10, 0],
            ],
            'a' => [
                'name' => ['b' => ['c' => 'deep.txt']],
                'full_path' => ['b' => ['c' => 'deep.txt']],
                'type' => ['b' => ['c' => 'text/plain']],
                'tmp_name' => ['b' => ['c' => '/tmp/c']],
                'error' => ['b' => ['c' => 0]],
                'size' => ['b' => ['c' => 3]],
            ],
        ], $files[0]);
        $this->assertSame(['title' => 't'], $files[1]);
    }

    public function testSuperglobalsAreRestoredAfterEveryRequest(): void
    {
        $saved = [$_SERVER, $_GET, $_POST, $_COOKIE, $_FILES, $_REQUEST];
        $_GET = ['outside' => 'get'];
        $_POST = ['outside' => 'post'];
        $_COOKIE = ['outside' => 'cookie'];
        $_FILES = ['outside' => 'files'];
        $_REQUEST = ['outside' => 'request'];
        $_SERVER['OUTSIDE'] = 'server';
        $outside = [$_SERVER, $_GET, $_POST, $_COOKIE, $_FILES, $_REQUEST];
        try {
            $during = [];
            $responses = self::serve(Frames::get(1, '/?x=1') . Frames::request(2, 'POST', '/', [['content-type', 'application/x-www-form-urlencoded']], 'y=2') . Frames::get(3, '/throw'),
                function () use (&$during): void {
                    $during[] = [$_GET, $_POST, $_SERVER['OUTSIDE'] ?? null];
                    $_GET['leak'] = $_POST['leak'] = $_SERVER['LEAK'] = 'from the script';
                    $GLOBALS['_COOKIE'] = ['leak' => 'x'];
                    if ($_SERVER['REQUEST_URI'] === '/throw') {
                        throw new \RuntimeException('restored even so');
                    }
                });

            $this->assertSame([200, 200, 500], array_column($responses, 'status'));
            $this->assertSame([
                [['x' => '1'], [], 'server'],
                [[], ['y' => '2'], 'server'],
                [[], [], 'server'],
            ], $during, 'each request sees only its own values, not the previous one\'s');
            $this->assertSame($outside, [$_SERVER, $_GET, $_POST, $_COOKIE, $_FILES, $_REQUEST]);
        } finally {
            [$_SERVER, $_GET, $_POST, $_COOKIE, $_FILES, $_REQUEST] = $saved;
        }
    }

    public function testEchoedOutputIsTheBodyIncludingBuffersLeftOpen(): void
    {
        $level = ob_get_level();
        $responses = self::serve(Frames::get(1, '/') . Frames::get(2, '/') . Frames::get(3, '/'), function (): void {
            static $call = 0;
            ++$call;
            echo "call $call:";
            if ($call === 1) {
                ob_start();
                echo ' nested';
                ob_start(static fn (string $s): string => strtoupper($s));
                echo ' upper';
            } elseif ($call === 2) {
                print ' flushed';
                ob_end_flush(); // the script closes its top-level buffer, as under FPM...
                echo ' after'; // ...and what follows still reaches the client
            } else {
                printf(' %s', 'printf');
            }
        });

        $this->assertSame(['call 1: nested UPPER', 'call 2: flushed after', 'call 3: printf'], array_column($responses, 'body'));
        $this->expectOutputString('');
        $this->assertSame($level, ob_get_level());
    }

    public function testStatusComesFromHttpResponseCodeAndIsResetEachRequest(): void
    {
        $responses = self::serve(Frames::get(1, '/') . Frames::get(2, '/'), function (): void {
            if ($_SERVER['REQUEST_URI'] === '/' && !isset($GLOBALS['peregrineTestSecond'])) {
                $GLOBALS['peregrineTestSecond'] = true;
                http_response_code(418);
            }
        });
        unset($GLOBALS['peregrineTestSecond']);

        $this->assertSame([418, 200], array_column($responses, 'status'));
    }

    public function testStatusOutsideWhatAnAnswerCarriesIs502WithoutABody(): void
    {
        $frames = Frames::get(1, '/?c=1000') . Frames::get(2, '/?c=65736') . Frames::get(3, '/?c=-1') . Frames::get(4, '/?c=999');
        $responses = self::serve($frames, function (): void {
            header('X-Before: 1');
            http_response_code((int) $_GET['c']);
            echo 'body';
        });

        $this->assertSame([502, 502, 502, 999], array_column($responses, 'status'));
        $this->assertSame(['', '', '', 'body'], array_column($responses, 'body'));
        $this->assertSame([], $responses[0]['headers']);
    }

    public function testHeaderReplacesOrAddsAndSetsADefaultContentType(): void
    {
        $r = self::one(Frames::get(1, '/'), function (): void {
            header('X-One: first');
            header('x-one: replaced');
            header('Set-Cookie: a=1', false);
            header('Set-Cookie: b=2', false);
            header('X-Spaces:    trimmed   ');
        });

        $this->assertSame([
            ['x-one', 'replaced'],
            ['Set-Cookie', 'a=1'],
            ['Set-Cookie', 'b=2'],
            ['X-Spaces', 'trimmed'],
            ['Content-type', 'text/html; charset=UTF-8'],
        ], $r['headers']);
        $this->assertSame(200, $r['status']);
    }

    public function testContentTypeGetsTheDefaultCharsetLikePhp(): void
    {
        $text = self::one(Frames::get(1, '/'), fn () => header('Content-Type: text/plain'));
        $json = self::one(Frames::get(1, '/'), fn () => header('content-type: application/json'));
        $none = self::one(Frames::get(1, '/'), fn () => header('Content-Type:'));
        $removed = self::one(Frames::get(1, '/'), fn () => header_remove('Content-Type'));

        $this->assertSame([['Content-type', 'text/plain;charset=UTF-8']], $text['headers']);
        $this->assertSame([['Content-type', 'application/json']], $json['headers']);
        $this->assertSame([], $none['headers'], 'an empty Content-Type means none');
        $this->assertSame([], $removed['headers']);
    }

    /** @dataProvider statusHeaders */
    public function testHeadersThatSetTheStatus(string $method, string $protocol, \Closure $script, int $status): void
    {
        $r = self::one(Frames::request(1, $method, '/', [], protocol: $protocol), $script);

        $this->assertSame($status, $r['status']);
    }

    /** @return array<string, array{string, string, \Closure, int}> */
    public static function statusHeaders(): array
    {
        return [
            'status line' => ['GET', 'HTTP/1.1', fn () => header('HTTP/1.1 404 Not Found'), 404],
            'status line ignores the code argument' => ['GET', 'HTTP/1.1', fn () => header('HTTP/1.0 503 Busy', true, 200), 503],
            'response code argument' => ['GET', 'HTTP/1.1', fn () => header('X-A: 1', true, 202), 202],
            'Location after GET' => ['GET', 'HTTP/1.1', fn () => header('Location: /next'), 302],
            // PHP-FPM sets proto_num to 1000 (HTTP/1.0) for every request: 302, not PHP's 303.
            'Location after POST' => ['POST', 'HTTP/1.1', fn () => header('Location: /next'), 302],
            'Location after PUT over HTTP/2' => ['PUT', 'HTTP/2.0', fn () => header('Location: /next'), 302],
            'Location after POST over HTTP/1.0' => ['POST', 'HTTP/1.0', fn () => header('Location: /next'), 302],
            'Location with a code' => ['GET', 'HTTP/1.1', fn () => header('Location: /next', true, 307), 307],
            'Location keeps a 3xx' => ['GET', 'HTTP/1.1', function (): void {
                http_response_code(301);
                header('Location: /next');
            }, 301],
            'Location keeps 201' => ['POST', 'HTTP/1.1', function (): void {
                http_response_code(201);
                header('Location: /made');
            }, 201],
            'WWW-Authenticate' => ['GET', 'HTTP/1.1', fn () => header('WWW-Authenticate: Basic realm="x"'), 401],
        ];
    }

    public function testLocationHeaderIsSent(): void
    {
        $r = self::one(Frames::get(1, '/'), fn () => header('Location: https://example.com/next'));

        $this->assertSame(['Location', 'https://example.com/next'], $r['headers'][0]);
    }

    public function testHeaderRemoveAndHeadersList(): void
    {
        $lists = [];
        $r = self::one(Frames::get(1, '/'), function () use (&$lists): void {
            header('X-A: 1');
            header('X-B: 2');
            header('X-B: 3', false);
            $lists[] = headers_list();
            header_remove('x-b');
            $lists[] = headers_list();
            header_remove();
            $lists[] = headers_list();
            header('X-C: 4');
        });

        $this->assertSame([['X-A: 1', 'X-B: 2', 'X-B: 3'], ['X-A: 1'], []], $lists);
        $this->assertSame([['X-C', '4'], ['Content-type', 'text/html; charset=UTF-8']], $r['headers']);
    }

    public function testHeadersDoNotLeakIntoTheNextRequest(): void
    {
        $responses = self::serve(Frames::get(1, '/') . Frames::get(2, '/'), function (): void {
            static $first = true;
            if ($first) {
                header('X-First: yes');
            }
            $first = false;
        });

        $this->assertSame([['X-First', 'yes'], ['Content-type', 'text/html; charset=UTF-8']], $responses[0]['headers']);
        $this->assertSame([['Content-type', 'text/html; charset=UTF-8']], $responses[1]['headers']);
    }

    public function testAHeaderWithANewlineIsRefusedWithAWarning(): void
    {
        $warnings = [];
        set_error_handler(function (int $level, string $message) use (&$warnings): bool {
            $warnings[] = [$level, $message];

            return true;
        });
        try {
            $r = self::one(Frames::get(1, '/'), fn () => header("X-A: 1\r\nX-Injected: 1"));
        } finally {
            restore_error_handler();
        }

        $this->assertSame([[E_USER_WARNING, 'Header may not contain more than a single header, new line detected']], $warnings);
        $this->assertSame([['Content-type', 'text/html; charset=UTF-8']], $r['headers']);
    }

    public function testAThrowingScriptIsA500WithoutItsHeadersOrOutput(): void
    {
        $level = ob_get_level();
        $responses = self::serve(Frames::get(1, '/') . Frames::get(2, '/'), function (): void {
            static $first = true;
            if ($first) {
                $first = false;
                header('X-Partial: yes');
                echo 'partial output';
                ob_start();
                throw new \DomainException('script failed');
            }
            echo 'second';
        });

        $this->assertSame(500, $responses[0]['status']);
        $this->assertSame('Internal Server Error', $responses[0]['body']);
        $this->assertSame([['Content-Type', 'text/plain; charset=utf-8']], $responses[0]['headers']);
        $this->assertSame(['id' => 2, 'status' => 200, 'headers' => [['Content-type', 'text/html; charset=UTF-8']], 'body' => 'second'], $responses[1]);
        $this->assertSame($level, ob_get_level());
    }

    public function testFramesStayIntact(): void
    {
        // What a script echoes never reaches the frames: the body is the only place it goes.
        $w = new InMemoryWorker(Frames::get(1, '/'));
        $w->worker->serveGlobals(function (): void {
            echo Frame::stop();
        });

        $this->assertSame(Frame::stop(), $w->responses()[0]['body']);
    }
}
