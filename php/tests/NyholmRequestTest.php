<?php

declare(strict_types=1);

namespace Peregrine\Tests;

use Nyholm\Psr7\Factory\Psr17Factory;
use Nyholm\Psr7\ServerRequest;
use Nyholm\Psr7\Uri;
use Peregrine\Internal\NyholmRequest;
use PHPUnit\Framework\TestCase;

/**
 * NyholmRequest::make() must make what Nyholm's own constructor makes of the same request, field
 * for field, or throw what it throws, whether it sets the fields itself or leaves them to Nyholm.
 */
final class NyholmRequestTest extends TestCase
{
    protected function setUp(): void
    {
        if (!class_exists(Psr17Factory::class)) {
            $this->markTestSkipped('nyholm/psr7 is not installed');
        }
    }

    /** @return array<string, array{array<string|int, list<string>>, bool}> headers, and whether make() sets them itself */
    public static function headers(): array
    {
        return [
            'host only: Nyholm checks one header for less' => [['host' => ['example.com']], false],
            'two headers' => [['host' => ['example.com'], 'accept' => ['*/*']], true],
            'a browser\'s' => [['host' => ['example.com:8080'], 'user-agent' => ['Mozilla/5.0 (X11)'], 'accept' => ['text/html,*/*;q=0.8'],
                'accept-language' => ['en-US,en;q=0.5'], 'cookie' => ['a=1; b=2'], 'x-obs' => ["caf\xC3\xA9"]], true],
            'repeated, empty and tab inside' => [['x-a' => ['1', '2', ''], 'host' => ['h'], 'x-b' => ["a\tb"]], true],
            'all digits, a string key: left to Nyholm all the same' => [['host' => ['h'], '0123' => ['v']], false],
            'every token character' => [["!#$%&'*+-.^_`|~09az" => ['v'], 'host' => ['h']], true],
            'no Host: Nyholm adds it from the URI' => [['accept' => ['*/*']], false],
            'an upper-case name' => [['host' => ['h'], 'X-Up' => ['v']], false],
            'an integer name' => [['host' => ['h'], 123 => ['v']], false],
            'a negative integer name' => [['host' => ['h'], -1 => ['v']], false],
            'a value to trim' => [['host' => ['h'], 'x' => [' v']], false],
            'a value ending in a tab' => [['host' => ['h'], 'x' => ['a', "v\t"]], false],
            'a value ending in a space, last' => [['host' => ['h '], 'x' => ['v ']], false],
            'a line feed in a value' => [['host' => ['h'], 'x' => ["a\nb"]], false],
            'a control character in a value' => [['host' => ['h'], 'x' => ["a\x01b"]], false],
            'DEL in a value' => [['host' => ['h'], 'x' => ["a\x7Fb"]], false],
            'a line feed in a name' => [['host' => ['h'], "a\nb" => ['v']], false],
            'a space in a name' => [['host' => ['h'], 'a b' => ['v']], false],
            'an empty name' => [['host' => ['h'], '' => ['v']], false],
            'no values' => [['host' => ['h'], 'x' => []], false],
        ];
    }

    /**
     * @dataProvider headers
     *
     * @param array<string|int, list<string>> $headers
     */
    public function testMakesWhatNyholmsConstructorMakes(array $headers, bool $direct): void
    {
        $server = ['REQUEST_METHOD' => 'PUT', 'HTTP_HOST' => 'h'];
        $uri = 'http://example.com:8080/a/b?c=d';
        try {
            $want = new ServerRequest('PUT', new Uri($uri), $headers, null, '2', $server);
        } catch (\InvalidArgumentException $e) {
            $this->expectExceptionObject($e);
        }

        $got = NyholmRequest::make('PUT', $uri, $headers, '', '2', $server);

        $this->assertEquals($want, $got);
        $this->assertSame(array_keys($want->getHeaders()), array_keys($got->getHeaders()), 'the same order');
        $this->assertSame($direct, self::setsDirectly($headers), 'make() leaves only what it cannot vouch for to Nyholm');
    }

    public function testBodyAndSharedUri(): void
    {
        $headers = ['host' => ['h'], 'content-type' => ['application/json']];

        $a = NyholmRequest::make('POST', 'http://h/x', $headers, '{"a":1}', '1.1', []);
        $b = NyholmRequest::make('GET', 'http://h/x', $headers, '', '1.1', []);

        $this->assertSame('{"a":1}', (string) $a->getBody());
        $this->assertTrue($a->getBody()->isSeekable());
        $this->assertSame('', (string) $b->getBody());
        $this->assertSame($a->getUri(), $b->getUri(), 'Uri is immutable: one for all requests to it');
        $this->assertSame('http://h/y', (string) $b->withUri(new Uri('http://h/y'))->getUri());
        $this->assertSame('http://h/x', (string) $b->getUri());
        $this->assertSame(['x'], $b->withHeader('X-New', 'x')->getHeader('x-new'));
        $this->assertSame('h', $b->getHeaderLine('Host'));
    }

    /** @param array<string|int, list<string>> $headers */
    private static function setsDirectly(array $headers): bool
    {
        $names = (new \ReflectionMethod(NyholmRequest::class, 'names'))->invoke(null, $headers);

        return \count($headers) > 1 && $names !== null && (new \ReflectionProperty(NyholmRequest::class, 'direct'))->getValue() === true;
    }
}
