<?php

declare(strict_types=1);

namespace Peregrine\Tests;

use Peregrine\Internal\HeaderCheck;
use PHPUnit\Framework\TestCase;

final class HeaderCheckTest extends TestCase
{
    /** @return iterable<string, array{array<string|int, mixed>}> */
    public static function sendable(): iterable
    {
        yield 'plain' => [['Content-Type' => 'text/plain', 'X-Empty' => '']];
        yield 'every token character' => [["!#$%&'*+-.^_`|~09AZaz" => 'v']];
        yield 'a list, numbers' => [['Set-Cookie' => ['a=1', 'b=2'], 'X-Count' => 3, 'X-Ratio' => [1.5]]];
        yield 'an all-digit name, an integer key' => [[123 => 'x']];
        yield 'a tab and high bytes in a value' => [['X-V' => "a\tb \xC3\xA9"]];
        yield 'no values' => [['X-None' => []]];
    }

    /**
     * @dataProvider sendable
     *
     * @param array<string|int, mixed> $headers
     */
    public function testSendableHeadersPass(array $headers): void
    {
        HeaderCheck::all($headers);
        $this->addToAssertionCount(1);
    }

    /** @return iterable<string, array{array<string|int, mixed>, string}> */
    public static function refused(): iterable
    {
        yield 'a name that makes a Set-Cookie' => [['Set-Cookie: injected=1; X-D' => 'v'], 'Response header name "Set-Cookie: injected=1; X-D" is not a token'];
        yield 'a colon' => [['X:' => 'v'], 'name "X:" is not a token'];
        yield 'a space' => [['X Y' => 'v'], 'is not a token'];
        yield 'empty' => [['' => 'v'], 'name "" is not a token'];
        yield 'a line break in a name' => [["X\r\nSet-Cookie" => 'v'], 'name "X\\r\\nSet-Cookie" is not a token'];
        yield 'a non-ASCII name' => [["X-\xC3\xA9" => 'v'], 'is not a token'];
        yield 'CRLF in a value' => [['X-A' => "v\r\nSet-Cookie: a=1"], 'Response header "X-A" has a CR, LF or NUL byte'];
        yield 'LF alone' => [['X-A' => "v\nw"], 'CR, LF or NUL'];
        yield 'CR alone, in a list' => [['X-A' => ['ok', "v\rw"]], 'CR, LF or NUL'];
        yield 'NUL' => [['X-A' => "v\0"], 'CR, LF or NUL'];
        yield 'a bool' => [['X-A' => true], 'has a value of type bool'];
        yield 'a nested list' => [['X-A' => [['v']]], 'has a value of type array'];
    }

    /**
     * @dataProvider refused
     *
     * @param array<string|int, mixed> $headers
     */
    public function testUnsendableHeadersAreRefused(array $headers, string $message): void
    {
        $this->expectException(\InvalidArgumentException::class);
        $this->expectExceptionMessage($message);
        HeaderCheck::all($headers);
    }
}
