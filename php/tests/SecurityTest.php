<?php

declare(strict_types=1);

namespace Peregrine\Tests;

use Peregrine\Http\Request;
use Peregrine\Http\Response;
use Peregrine\Internal\Cookies;
use Peregrine\Internal\ServerParams;
use Peregrine\Internal\Superglobals;
use PHPUnit\Framework\TestCase;

use function Peregrine\Http\header;

/**
 * The findings of issue 9 that the PHP library fixes: sessions, httpoxy, collisions, output
 * buffering, the Status header, integer header names and cookie parsing. See docs/security.md.
 */
final class SecurityTest extends TestCase
{
    private static function runScript(Request $request, callable $script): Response
    {
        return (new Superglobals(new ServerParams([], '/srv')))->run($request, $script);
    }

    /**
     * Runs the requests in a fresh PHP process (PHPUnit has written to STDOUT, so PHP refuses
     * sessions in this one) and returns what each saw.
     *
     * @param list<array{cookie: ?string, set: ?string, close: bool}> $requests
     *
     * @return list<array<string, mixed>>
     */
    private static function sessions(array $requests): array
    {
        $dir = sys_get_temp_dir() . '/peregrine-sessions-' . bin2hex(random_bytes(4));
        mkdir($dir);
        try {
            $p = proc_open([PHP_BINARY, __DIR__ . '/fixtures/sessions.php', $dir], [['pipe', 'r'], ['pipe', 'w'], ['pipe', 'w']], $pipes);
            self::assertIsResource($p);
            fwrite($pipes[0], json_encode($requests, JSON_THROW_ON_ERROR));
            fclose($pipes[0]);
            $out = stream_get_contents($pipes[1]);
            $err = stream_get_contents($pipes[2]);
            self::assertSame(0, proc_close($p), "sessions.php failed: $err");
            $result = json_decode((string) $out, true, flags: JSON_THROW_ON_ERROR);
            self::assertFalse($result['headersSent']);

            return $result['results'];
        } finally {
            array_map('unlink', glob("$dir/*") ?: []);
            rmdir($dir);
        }
    }

    public function testSessionsOfInterleavedUsersStayApart(): void
    {
        $r = self::sessions([
            ['cookie' => null, 'set' => 'alice', 'close' => false],             // 0: A logs in
            ['cookie' => 'PHPSESSID=bbbbbbbbbbbbbbbbbbbbbbbbbb', 'set' => 'bob', 'close' => true], // 1: B, own id
            ['cookie' => null, 'set' => null, 'close' => false],                // 2: no cookie
            ['cookie' => 'PHPSESSID={0}', 'set' => null, 'close' => false],     // 3: A again
            ['cookie' => 'PHPSESSID={1}', 'set' => null, 'close' => true],      // 4: B again
            ['cookie' => 'other=1', 'set' => null, 'close' => false],           // 5: no session cookie
        ]);

        $this->assertNotSame('', $r[0]['id']);
        $this->assertSame(['PHPSESSID=' . $r[0]['id'] . '; path=/'], $r[0]['setCookie'], 'a new session sends its cookie');
        $this->assertSame(['no-store, no-cache, must-revalidate'], $r[0]['cacheControl'], 'session.cache_limiter=nocache');
        $this->assertSame('bbbbbbbbbbbbbbbbbbbbbbbbbb', $r[1]['id'], 'the id comes from $_COOKIE');
        $this->assertNull($r[1]['user'], "B must not see A's session");
        $this->assertSame([], $r[1]['setCookie'], 'the client already has this id');
        $this->assertNotContains($r[2]['id'], [$r[0]['id'], $r[1]['id']], 'no cookie: a new session');
        $this->assertNull($r[2]['user']);
        $this->assertSame(['PHPSESSID=' . $r[2]['id'] . '; path=/'], $r[2]['setCookie']);
        $this->assertSame([$r[0]['id'], 'alice'], [$r[3]['id'], $r[3]['user']]);
        $this->assertSame([$r[1]['id'], 'bob'], [$r[4]['id'], $r[4]['user']]);
        $this->assertNotContains($r[5]['id'], [$r[0]['id'], $r[1]['id'], $r[2]['id']]);
        $this->assertNull($r[5]['user']);
        foreach ($r as $i => $seen) {
            $this->assertFalse($seen['before'], "request $i: \$_SESSION is unset before session_start(), as under FPM");
            $this->assertFalse($seen['after'], "request $i: \$_SESSION is unset afterwards");
            $this->assertSame(PHP_SESSION_NONE, $seen['status'], "request $i: the session is closed afterwards");
            $this->assertSame('ok', $seen['body']);
        }
    }

    public function testProxyHeaderNeverBecomesHttpProxy(): void
    {
        $server = [];
        self::runScript(new Request(headers: ['Proxy' => 'http://evil.example:3128', 'Host' => 'x']), function () use (&$server): void {
            $server = $_SERVER;
        });

        $this->assertArrayNotHasKey('HTTP_PROXY', $server);
        $this->assertSame('x', $server['HTTP_HOST']);
    }

    public function testHttpVariablesOfTheWorkersEnvironmentAreDropped(): void
    {
        $params = new ServerParams(['HTTP_PROXY' => 'http://evil.example', 'PATH' => '/bin'], '/srv');
        $server = $params->build(new Request(), 0.0);

        $this->assertArrayNotHasKey('HTTP_PROXY', $server);
        $this->assertSame('/bin', $server['PATH']);
    }

    public function testAnAllDigitHeaderNameIsNotAnError(): void
    {
        $server = [];
        // What the frame decoder builds: "123" is an integer array key.
        $request = Request::fromFrame(['GET', '/', '/', '', 'HTTP/1.1', '127.0.0.1', '1', '127.0.0.1', '80', 'http', ''],
            [123 => ['x'], 'host' => ['h']], '', []);
        self::runScript($request, function () use (&$server): void {
            $server = $_SERVER;
        });

        $this->assertSame('x', $server['HTTP_123']);
    }

    public function testServerNameIsNotTheClientsHostHeader(): void
    {
        $server = (new ServerParams([], '/srv'))->build(new Request(headers: ['Host' => 'evil.example'], serverAddr: '10.0.0.1'), 0.0);
        $this->assertSame('10.0.0.1', $server['SERVER_NAME']);
        $this->assertSame('evil.example', $server['HTTP_HOST']);

        $server = (new ServerParams(['PEREGRINE_SERVER_NAME' => 'www.example.com'], '/srv'))->build(new Request(headers: ['Host' => 'evil.example']), 0.0);
        $this->assertSame('www.example.com', $server['SERVER_NAME']);
    }

    /** @return iterable<string, array{string, array<string, mixed>}> */
    public static function cookieHeaders(): iterable
    {
        // What PHP-FPM (and php -S) put in $_COOKIE for the same header.
        yield 'array first, then plain' => ['a[b]=1; a[c]=2; a=3', ['a' => ['b' => '1', 'c' => '2']]];
        yield 'plain first, then array' => ['a=3; a[b]=1', ['a' => ['b' => '1']]];
        yield 'first plain wins' => ['a=1; a=2', ['a' => '1']];
        yield 'dot and underscore' => ['a.b=1; a_b=2', ['a_b' => '1']];
        yield 'nested key, last wins' => ['x[y]=1; x[y]=2', ['x' => ['y' => '2']]];
    }

    /** @dataProvider cookieHeaders */
    public function testCookiesParseAsPhpDoes(string $header, array $expected): void
    {
        $this->assertSame($expected, Cookies::parse([$header]));
    }

    public function testCookiesAreCappedAtMaxInputVars(): void
    {
        $max = (int) ini_get('max_input_vars') ?: 1000;
        // All-digit names multiple of 2^20 collide in PHP's hash table: the cap bounds the cost.
        $pairs = [];
        for ($i = 1; $i <= $max + 500; $i++) {
            $pairs[] = ($i << 20) . '=1';
        }
        $this->assertCount($max, Cookies::parse([implode('; ', $pairs)]));
        $pairs[] = 'a[b]=1';
        $this->assertCount($max, Cookies::parse([implode('; ', $pairs)]));
    }

    public function testStatusHeaderSetsTheStatusAsThroughFpm(): void
    {
        $response = self::runScript(new Request(), function (): void {
            header('Status: 403 Forbidden');
            echo 'no';
        });

        $this->assertSame(403, $response->status);
        $this->assertArrayNotHasKey('Status', $response->headers, 'nginx takes the Status header for itself');
        $this->assertSame('no', $response->body);
    }

    public function testAnInvalidStatusHeaderIsDropped(): void
    {
        $response = self::runScript(new Request(), function (): void {
            header('Status: nonsense');
        });

        $this->assertSame(200, $response->status);
        $this->assertArrayNotHasKey('Status', $response->headers);
    }

    /** @return iterable<string, array{\Closure(): void, string}> */
    public static function outputScripts(): iterable
    {
        yield 'ob_clean at the top level' => [function (): void {
            echo 'secret';
            ob_clean();
            echo 'body';
        }, 'body'];
        yield 'ob_get_clean at the top level' => [function (): void {
            echo 'secret';
            $s = ob_get_clean();
            echo 'body', \strlen((string) $s);
        }, 'body6'];
        yield 'ob_end_clean at the top level' => [function (): void {
            echo 'secret';
            ob_end_clean();
            echo 'body';
        }, 'body'];
        yield 'ob_end_flush at the top level' => [function (): void {
            echo 'a';
            ob_end_flush();
            echo 'b';
        }, 'ab'];
        yield 'nested buffers left open' => [function (): void {
            echo 'a';
            ob_start();
            echo 'b';
            ob_start(static fn (string $s): string => strtoupper($s));
            echo 'c';
        }, 'abC'];
        yield 'own buffer discarded' => [function (): void {
            ob_start();
            echo 'secret';
            ob_end_clean();
            echo 'body';
        }, 'body'];
    }

    /** @dataProvider outputScripts */
    public function testOutputBuffersBehaveAsUnderFpm(\Closure $script, string $body): void
    {
        $level = ob_get_level();
        $response = self::runScript(new Request(), $script);

        $this->assertSame($body, $response->body);
        if ($body !== 'body' || $level === ob_get_level()) {
            $this->assertSame($level, ob_get_level(), 'no buffer is left for the next request');
        }
    }

    /** @return iterable<string, array{int}> */
    public static function stuckFlags(): iterable
    {
        yield 'ob_start(null, 0, 0)' => [0];
        yield 'cleanable only' => [PHP_OUTPUT_HANDLER_CLEANABLE];
    }

    /**
     * A buffer without PHP_OUTPUT_HANDLER_REMOVABLE cannot be closed by PHP code: its output is
     * still the body, the next request does not repeat it, and the worker reports that it
     * should be replaced. In a process of its own, since the buffer stays.
     *
     * @dataProvider stuckFlags
     */
    public function testANonRemovableBufferStillGivesTheBody(int $flags): void
    {
        $p = proc_open([PHP_BINARY, __DIR__ . '/fixtures/stuck-buffer.php', (string) $flags], [['pipe', 'r'], ['pipe', 'w'], ['pipe', 'w']], $pipes);
        $this->assertIsResource($p);
        fclose($pipes[0]);
        $out = stream_get_contents($pipes[1]);
        $err = stream_get_contents($pipes[2]);
        $this->assertSame(0, proc_close($p), "stuck-buffer.php failed: $err");
        $r = json_decode(strtok((string) $out, "\n"), true, flags: JSON_THROW_ON_ERROR);

        // What cannot be read below the stuck buffer is the part echoed before it was opened.
        $this->assertSame('body', $r['bodies'][0]);
        $this->assertSame('second', $r['bodies'][1]);
        $this->assertTrue($r['stuck']);
    }
}
