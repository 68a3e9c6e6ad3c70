<?php

declare(strict_types=1);

namespace Peregrine\Tests;

use Nyholm\Psr7\Factory\Psr17Factory;
use Peregrine\Internal\Frame;
use Peregrine\Internal\PsrBridge;
use Peregrine\Internal\RequestDecoder;
use Peregrine\Internal\ServerParams;
use Peregrine\Tests\Support\Frames;
use Peregrine\Tests\Support\InMemoryWorker;
use PHPUnit\Framework\TestCase;
use Psr\Http\Message\ResponseInterface;
use Psr\Http\Message\ServerRequestInterface;
use Psr\Http\Message\UploadedFileInterface;

final class PsrBridgeTest extends TestCase
{
    private string $upload;

    protected function setUp(): void
    {
        if (!class_exists(Psr17Factory::class)) {
            $this->markTestSkipped('nyholm/psr7 is not installed');
        }
        $this->upload = (string) tempnam(sys_get_temp_dir(), 'peregrine-upload-');
        file_put_contents($this->upload, 'file content');
    }

    protected function tearDown(): void
    {
        @unlink($this->upload);
    }

    /** @return array<string, array{object}> */
    public static function factories(): array
    {
        return [
            'Nyholm fast path' => [new Psr17Factory()],
            'any PSR-17 factory' => [new GenericFactory()],
        ];
    }

    /** @dataProvider factories */
    public function testBuildsAFullServerRequest(object $factory): void
    {
        $frame = Frames::request(1, 'POST', '/form/x?q=1&list[]=a', [
            ['host', 'example.com:8443'],
            ['content-type', 'multipart/form-data; boundary=x'],
            ['cookie', 'sid=abc; theme=dark'],
            ['x-repeat', 'one'],
            ['x-repeat', 'two'],
        ], '', 'title=Hello&tags[]=a', [
            ['avatar', 'me.png', 'image/png', 12, UPLOAD_ERR_OK, $this->upload],
            ['docs[]', '', '', 0, UPLOAD_ERR_NO_FILE, ''],
        ], scheme: 'https', protocol: 'HTTP/2.0');
        $bridge = new PsrBridge($factory, new ServerParams($_SERVER, '/srv'));

        $psr = $bridge->request(RequestDecoder::decode(substr($frame, Frame::HEADER_SIZE)));

        $this->assertSame('POST', $psr->getMethod());
        $this->assertSame('https://example.com:8443/form/x?q=1&list%5B%5D=a', (string) $psr->getUri(), 'as Nyholm normalises it');
        $this->assertSame('2.0', $psr->getProtocolVersion());
        $this->assertSame(['one', 'two'], $psr->getHeader('X-Repeat'));
        $this->assertSame('example.com:8443', $psr->getHeaderLine('Host'));
        $this->assertSame(['q' => '1', 'list' => ['a']], $psr->getQueryParams());
        $this->assertSame(['sid' => 'abc', 'theme' => 'dark'], $psr->getCookieParams());
        $this->assertSame(['title' => 'Hello', 'tags' => ['a']], $psr->getParsedBody());
        $this->assertSame('', (string) $psr->getBody());
        $server = $psr->getServerParams();
        $this->assertSame('POST', $server['REQUEST_METHOD']);
        $this->assertSame('/form/x?q=1&list[]=a', $server['REQUEST_URI']);
        $this->assertSame('on', $server['HTTPS']);
        $this->assertSame('192.0.2.7', $server['REMOTE_ADDR']);
        $this->assertSame('/srv', $server['DOCUMENT_ROOT']);
        $this->assertSame('sid=abc; theme=dark', $server['HTTP_COOKIE']);

        $files = $psr->getUploadedFiles();
        $this->assertInstanceOf(UploadedFileInterface::class, $files['avatar']);
        $this->assertSame('me.png', $files['avatar']->getClientFilename());
        $this->assertSame('image/png', $files['avatar']->getClientMediaType());
        $this->assertSame(12, $files['avatar']->getSize());
        $this->assertSame(UPLOAD_ERR_OK, $files['avatar']->getError());
        $this->assertSame('file content', (string) $files['avatar']->getStream());
        $this->assertSame(UPLOAD_ERR_NO_FILE, $files['docs'][0]->getError());
    }

    /** @dataProvider factories */
    public function testBodyAndMinimalRequest(object $factory): void
    {
        $bridge = new PsrBridge($factory, new ServerParams([], '/'));
        $frame = Frames::request(1, 'PUT', '/raw', [['host', 'h'], ['content-type', 'application/json']], '{"a":1}');

        $psr = $bridge->request(RequestDecoder::decode(substr($frame, Frame::HEADER_SIZE)));

        $this->assertSame('{"a":1}', (string) $psr->getBody());
        $this->assertNull($psr->getParsedBody());
        $this->assertSame([], $psr->getQueryParams());
        $this->assertSame([], $psr->getCookieParams());
        $this->assertSame([], $psr->getUploadedFiles());
        $this->assertSame('http://h/raw', (string) $psr->getUri());
        $this->assertSame('1.1', $psr->getProtocolVersion());
    }

    public function testUriWithoutHostUsesTheServerAddress(): void
    {
        $bridge = new PsrBridge(new Psr17Factory(), new ServerParams([], '/'));
        $frame = Frame::request(1, ['GET', '/x', '/x', '', 'HTTP/1.0', '::1', '1', '::1', '8080', 'http', '']);

        $psr = $bridge->request(RequestDecoder::decode(substr($frame, Frame::HEADER_SIZE)));

        $this->assertSame('http://[::1]:8080/x', (string) $psr->getUri());
    }

    public function testServePsrConvertsResponsesBack(): void
    {
        $factory = new Psr17Factory();
        $w = new InMemoryWorker(Frames::get(5, '/?name=psr') . Frames::get(6, '/throw') . Frames::get(7, '/string'));
        $w->worker->servePsr(function (ServerRequestInterface $r) use ($factory): mixed {
            return match ($r->getUri()->getPath()) {
                '/throw' => throw new \RuntimeException('psr failure'),
                '/string' => 'not a response',
                default => $factory->createResponse(201, 'Made')
                    ->withHeader('Content-Type', 'text/plain')
                    ->withAddedHeader('Set-Cookie', 'a=1')
                    ->withAddedHeader('Set-Cookie', 'b=2')
                    ->withBody($factory->createStream('hello ' . $r->getQueryParams()['name'])),
            };
        }, $factory);

        [$ok, $thrown, $string] = $w->responses();
        $this->assertSame(['id' => 5, 'status' => 201, 'headers' => [
            ['Content-Type', 'text/plain'], ['Set-Cookie', 'a=1'], ['Set-Cookie', 'b=2'],
        ], 'body' => 'hello psr'], $ok);
        $this->assertSame(500, $thrown['status']);
        $this->assertSame(500, $string['status']);
        $log = $w->log();
        $this->assertStringStartsWith('Uncaught RuntimeException: psr failure in ', $log[0]);
        $this->assertSame('The handler returned string, not a Psr\Http\Message\ResponseInterface (request "GET /string")', $log[1]);
    }

    public function testServePsrTakesAHandlerObject(): void
    {
        $factory = new Psr17Factory();
        $handler = new class ($factory) {
            public function __construct(private readonly Psr17Factory $factory)
            {
            }

            public function handle(ServerRequestInterface $request): ResponseInterface
            {
                return $this->factory->createResponse(204);
            }
        };
        $w = new InMemoryWorker(Frames::get(1, '/'));
        $w->worker->servePsr($handler, $factory);

        $this->assertSame(204, $w->responses()[0]['status']);
    }

    public function testServePsrRejectsAnUnusableHandler(): void
    {
        $w = new InMemoryWorker(Frames::get(1, '/'));

        $this->expectException(\InvalidArgumentException::class);
        $this->expectExceptionMessage('handle()');
        $w->worker->servePsr(new \stdClass(), new Psr17Factory());
    }
}

/** A PSR-17 factory that is not exactly Nyholm's, so the bridge takes the generic path. */
final class GenericFactory extends Psr17Factory
{
}
