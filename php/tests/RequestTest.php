<?php

declare(strict_types=1);

namespace Peregrine\Tests;

use Peregrine\Http\Request;
use Peregrine\Http\UploadedFile;
use Peregrine\Internal\Frame;
use Peregrine\Internal\ProtocolError;
use Peregrine\Internal\RequestDecoder;
use Peregrine\Tests\Support\Frames;
use PHPUnit\Framework\TestCase;

final class RequestTest extends TestCase
{
    public function testDecodesTheFixedFields(): void
    {
        $r = self::decode(Frames::request(7, 'PUT', '/a/b%20c?x=1', [['host', 'example.com']], 'body', scheme: 'https', protocol: 'HTTP/2.0'));

        $this->assertSame('PUT', $r->method);
        $this->assertSame('/a/b%20c?x=1', $r->uri);
        $this->assertSame('/a/b%20c', $r->path, 'the path is not decoded');
        $this->assertSame('x=1', $r->query);
        $this->assertSame('HTTP/2.0', $r->protocol);
        $this->assertSame('https', $r->scheme);
        $this->assertSame('192.0.2.7', $r->remoteAddr);
        $this->assertSame(40000, $r->remotePort);
        $this->assertSame('127.0.0.1', $r->serverAddr);
        $this->assertSame(8080, $r->serverPort);
        $this->assertSame('body', $r->body);
    }

    public function testQueryParamsFollowParseStr(): void
    {
        $r = self::decode(Frames::get(1, '/?a[]=1&a[]=2&b[x][y]=z&c.d=%20e+f&flag'));

        $this->assertSame(['a' => ['1', '2'], 'b' => ['x' => ['y' => 'z']], 'c_d' => ' e f', 'flag' => ''], $r->queryParams);
        $this->assertSame([], self::decode(Frames::get(1, '/'))->queryParams);
    }

    public function testRepeatedHeadersKeepEveryValueInOrder(): void
    {
        $r = self::decode(Frames::get(1, '/', [['host', 'h'], ['x-repeat', 'one'], ['accept', '*/*'], ['x-repeat', 'two']]));

        $this->assertSame(['host' => ['h'], 'x-repeat' => ['one', 'two'], 'accept' => ['*/*']], $r->headers);
        $this->assertSame('one', $r->header('X-Repeat'), 'first value, any case');
        $this->assertSame('*/*', $r->header('ACCEPT'));
        $this->assertNull($r->header('x-missing'));
    }

    public function testCookiesAreParsedLikeCookieSuperglobal(): void
    {
        $r = self::decode(Frames::get(1, '/', [
            ['cookie', 'a=1; b=hello%20world+x;  c.d=3; a=ignored; list[]=x'],
            ['cookie', 'list[]=y; e; =novalue; f=%3D%3B'],
        ]));

        $this->assertSame([
            'a' => '1',
            'b' => 'hello world+x', // rawurldecode: "+" is not a space in cookies
            'c_d' => '3',
            'list' => ['x', 'y'],
            'e' => '',
            'f' => '=;',
        ], $r->cookies);
        $this->assertSame([], self::decode(Frames::get(1, '/'))->cookies);
    }

    public function testPlainCookieNamesFirstOneWins(): void
    {
        $r = self::decode(Frames::get(1, '/', [['cookie', 'a=1; b=x%20y+z; a=2; n; 7=seven'], ['cookie', 'b=later']]));

        $this->assertSame(['a' => '1', 'b' => 'x y+z', 'n' => '', 7 => 'seven'], $r->cookies);
    }

    /** @dataProvider urlencodedTypes */
    public function testUrlencodedBodyIsParsed(string $type): void
    {
        $r = self::decode(Frames::request(1, 'POST', '/', [['content-type', $type]], 'a=1&b[]=2&b[]=3&c=%26'));

        $this->assertSame(['a' => '1', 'b' => ['2', '3'], 'c' => '&'], $r->parsedBody);
        $this->assertTrue(isset($r->parsedBody));
    }

    /** @return array<string, array{string}> */
    public static function urlencodedTypes(): array
    {
        return [
            'plain' => ['application/x-www-form-urlencoded'],
            'upper case with charset' => ['Application/X-WWW-Form-URLEncoded ; charset=UTF-8'],
        ];
    }

    public function testOtherBodiesAreNotParsed(): void
    {
        $json = self::decode(Frames::request(1, 'POST', '/', [['content-type', 'application/json']], '{"a":1}'));
        $none = self::decode(Frames::request(1, 'POST', '/', [], 'a=1'));

        $this->assertNull($json->parsedBody);
        $this->assertFalse(isset($json->parsedBody));
        $this->assertNull($none->parsedBody);
        $this->assertSame('{"a":1}', $json->body);
    }

    public function testMultipartFieldsAndNestedFiles(): void
    {
        $r = self::decode(Frames::request(1, 'POST', '/form', [['content-type', 'multipart/form-data; boundary=x']], '',
            'title=Hello+world&tags[]=a&tags[]=b&user[name]=ann',
            [
                ['avatar', 'me.png', 'image/png', 1234, UPLOAD_ERR_OK, '/tmp/up-1'],
                ['docs[]', 'a.pdf', 'application/pdf', 10, UPLOAD_ERR_OK, '/tmp/up-2'],
                ['docs[]', '', '', 0, UPLOAD_ERR_NO_FILE, ''],
                ['a[b][c]', 'deep.txt', 'text/plain', 3, UPLOAD_ERR_OK, '/tmp/up-3'],
                ['a[d]', 'd.txt', 'text/plain', 4, UPLOAD_ERR_PARTIAL, '/tmp/up-4'],
            ]));

        $this->assertSame(['title' => 'Hello world', 'tags' => ['a', 'b'], 'user' => ['name' => 'ann']], $r->parsedBody);
        $this->assertSame('', $r->body);
        $this->assertEquals([
            'avatar' => new UploadedFile('me.png', 'image/png', 1234, UPLOAD_ERR_OK, '/tmp/up-1'),
            'docs' => [
                new UploadedFile('a.pdf', 'application/pdf', 10, UPLOAD_ERR_OK, '/tmp/up-2'),
                new UploadedFile('', '', 0, UPLOAD_ERR_NO_FILE, ''),
            ],
            'a' => [
                'b' => ['c' => new UploadedFile('deep.txt', 'text/plain', 3, UPLOAD_ERR_OK, '/tmp/up-3')],
                'd' => new UploadedFile('d.txt', 'text/plain', 4, UPLOAD_ERR_PARTIAL, '/tmp/up-4'),
            ],
        ], $r->files);
    }

    public function testMultipartWithoutFieldsHasAnEmptyParsedBody(): void
    {
        $r = self::decode(Frames::request(1, 'POST', '/', [['content-type', 'multipart/form-data; boundary=x']], ''));

        $this->assertSame([], $r->parsedBody);
        $this->assertSame([], $r->files);
    }

    public function testLazyPropertiesAreComputedOnceAndStayReadOnly(): void
    {
        $r = self::decode(Frames::get(1, '/?a=1', [['cookie', 'c=1']]));

        $this->assertTrue(isset($r->queryParams), 'isset() sees a lazy property');
        $this->assertSame(['a' => '1'], $r->queryParams);
        $this->assertSame(['c' => '1'], $r->cookies);
        $this->expectException(\Error::class);
        $this->expectExceptionMessage('readonly');
        $r->queryParams = ['a' => '2'];
    }

    public function testNullCoalescingOnLazyProperties(): void
    {
        $form = self::decode(Frames::request(1, 'POST', '/?q=1', [['content-type', 'application/x-www-form-urlencoded'], ['cookie', 'c=2']], 'a=1'));
        $json = self::decode(Frames::request(1, 'POST', '/?q=1', [['content-type', 'application/json']], '{}'));

        // "??" calls __isset() then __get(): the property must still be initialised only once.
        $this->assertSame(['a' => '1'], $form->parsedBody ?? 'none');
        $this->assertSame(['a' => '1'], $form->parsedBody);
        $this->assertSame('1', $form->queryParams['q'] ?? 'none');
        $this->assertSame('2', $form->cookies['c'] ?? 'none');
        $this->assertSame('none', $json->parsedBody ?? 'none');
        $this->assertNull($json->parsedBody);
    }

    public function testUnknownAndPrivatePropertiesAreNotReadable(): void
    {
        $r = new Request();

        $this->assertFalse(isset($r->form));
        $this->expectException(\Error::class);
        $this->expectExceptionMessage('Undefined property');
        $r->uploads;
    }

    public function testPublicConstructorDerivesWhatIsLeftOut(): void
    {
        $r = new Request('POST', '/submit?x[]=1', ['Content-Type' => 'application/x-www-form-urlencoded', 'Cookie' => 'id=42', 'X-Many' => ['a', 'b']], 'name=ann');

        $this->assertSame('/submit', $r->path);
        $this->assertSame('x[]=1', $r->query);
        $this->assertSame(['x' => ['1']], $r->queryParams);
        $this->assertSame(['content-type' => ['application/x-www-form-urlencoded'], 'cookie' => ['id=42'], 'x-many' => ['a', 'b']], $r->headers);
        $this->assertSame(['id' => '42'], $r->cookies);
        $this->assertSame(['name' => 'ann'], $r->parsedBody);
        $this->assertSame([], $r->files);
        $this->assertSame('application/x-www-form-urlencoded', $r->header('content-type'));
    }

    public function testPublicConstructorDefaultsAndOverrides(): void
    {
        $file = new UploadedFile('a.txt', 'text/plain', 1, UPLOAD_ERR_OK, '/tmp/a');
        $r = new Request(queryParams: ['q' => 'given'], cookies: ['c' => 'given'], parsedBody: ['p' => 'given'], files: ['f' => $file], remotePort: 5);

        $this->assertSame('GET', $r->method);
        $this->assertSame('/', $r->uri);
        $this->assertSame('/', $r->path);
        $this->assertSame('', $r->query);
        $this->assertSame(['q' => 'given'], $r->queryParams);
        $this->assertSame(['c' => 'given'], $r->cookies);
        $this->assertSame(['p' => 'given'], $r->parsedBody);
        $this->assertSame(['f' => $file], $r->files);
        $this->assertSame('127.0.0.1', $r->remoteAddr);
        $this->assertSame(5, $r->remotePort);
        $this->assertSame('http', $r->scheme);
        $this->assertSame('HTTP/1.1', $r->protocol);
        $this->assertNull((new Request())->parsedBody);
    }

    /** @dataProvider malformedPayloads */
    public function testMalformedPayloadsAreProtocolErrors(string $payload, string $message): void
    {
        $this->expectException(ProtocolError::class);
        $this->expectExceptionMessage($message);
        RequestDecoder::decode($payload);
    }

    /** @return array<string, array{string, string}> */
    public static function malformedPayloads(): array
    {
        $head = static fn (string $head, string $body = ''): string => pack('V', \strlen($head)) . $head . $body;
        $fixed = implode("\0", ['GET', '/', '/', '', 'HTTP/1.1', '1', '2', '3', '4', 'http', '']);

        return [
            'too short' => ["\1\0", 'no head length'],
            'head longer than payload' => [pack('V', 100) . 'abc', 'exceeds its payload'],
            'too few fields' => [$head("GET\0/"), 'has 2 fields'],
            'file count not a number' => [$head("$fixed\0x"), 'file count "x"'],
            'more files than fields' => [$head("$fixed\0" . '2' . "\0f\0n\0t\0" . "1\0" . "0\0/tmp/x"), 'file count "2"'],
            'file size not a number' => [$head("$fixed\0" . '1' . "\0f\0n\0t\0big\0" . "0\0/tmp/x"), 'size "big"'],
            'odd header fields' => [$head("$fixed\0" . "0\0" . "0\0host"), 'odd number of header fields'],
            'no parameter count' => [$head("$fixed\0" . '0'), 'parameter count ""'],
            'more parameters than fields' => [$head("$fixed\0" . "0\0" . "3\0a\0b"), 'parameter count "3"'],
        ];
    }

    private static function decode(string $frame): Request
    {
        return RequestDecoder::decode(substr($frame, Frame::HEADER_SIZE));
    }
}
