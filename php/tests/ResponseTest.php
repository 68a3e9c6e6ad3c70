<?php

declare(strict_types=1);

namespace Peregrine\Tests;

use Peregrine\Http\Response;
use Peregrine\Internal\Frame;
use Peregrine\Tests\Support\Frames;
use PHPUnit\Framework\TestCase;

final class ResponseTest extends TestCase
{
    public function testDefaults(): void
    {
        $r = new Response();

        $this->assertSame(200, $r->status);
        $this->assertSame([], $r->headers);
        $this->assertSame('', $r->body);
    }

    public function testBodyMayBeAnIterableOfParts(): void
    {
        $parts = (static function (): \Generator {
            yield 'a';
        })();

        $this->assertSame($parts, (new Response(200, [], $parts))->body);
        $this->assertSame(['a', 'b'], (new Response(body: ['a', 'b']))->body);
    }

    public function testHeaderListsBecomeRepeatedHeaders(): void
    {
        $r = new Response(201, ['Content-Type' => 'text/plain', 'Set-Cookie' => ['a=1', 'b=2'], 'X-Count' => 3, 'X-None' => []], 'made');
        [$frame] = Frames::split(Frame::response(77, $r->status, $r->headers, $r->body));

        $this->assertSame(Frame::RESPONSE, $frame['type']);
        $this->assertSame(77, $frame['id']);
        $this->assertSame([
            'status' => 201,
            'headers' => [['Content-Type', 'text/plain'], ['Set-Cookie', 'a=1'], ['Set-Cookie', 'b=2'], ['X-Count', '3']],
            'body' => 'made',
        ], Frames::response($frame['payload']));
    }

    public function testEmptyHeaderValueIsKept(): void
    {
        [$frame] = Frames::split(Frame::response(1, 200, ['X-Empty' => ''], ''));

        $this->assertSame([['X-Empty', '']], Frames::response($frame['payload'])['headers']);
    }

    public function testAHeaderThatCannotBeSentAsItselfIsRefused(): void
    {
        $this->expectException(\InvalidArgumentException::class);
        $this->expectExceptionMessage('Response header name "Set-Cookie: injected=1; X-D" is not a token');
        new Response(200, ['Set-Cookie: injected=1; X-D' => 'x']);
    }

    public function testAValueWithALineBreakIsRefused(): void
    {
        $this->expectException(\InvalidArgumentException::class);
        new Response(200, ['Location' => "/next\r\nSet-Cookie: a=1"]);
    }

    /** @dataProvider invalidStatuses */
    public function testStatusOutsideTheProtocolIsRefused(int $status): void
    {
        $this->expectException(\InvalidArgumentException::class);
        new Response($status);
    }

    /** @return array<string, array{int}> */
    public static function invalidStatuses(): array
    {
        return ['zero' => [0], 'below 100' => [99], 'above 999' => [1000]];
    }

    /** @dataProvider unencodableHeaders */
    public function testHeadersTheHeadCannotCarryAreRefused(array $headers, string $message): void
    {
        $this->expectException(\InvalidArgumentException::class);
        $this->expectExceptionMessage($message);
        Frame::response(1, 200, $headers, '');
    }

    /** @return array<string, array{array<mixed>, string}> */
    public static function unencodableHeaders(): array
    {
        return [
            'NUL in a value' => [['X-A' => "a\0b"], 'NUL'],
            'NUL in a listed value' => [['X-A' => ['ok', "a\0b"]], 'NUL'],
            'NUL in a name' => [["X\0A" => 'v'], 'NUL'],
            'empty name' => [['' => 'v'], 'empty'],
            'null value' => [['X-A' => null], 'type null'],
        ];
    }
}
