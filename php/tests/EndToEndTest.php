<?php

declare(strict_types=1);

namespace Peregrine\Tests;

use Peregrine\Internal\Frame;
use Peregrine\Tests\Support\Frames;
use Peregrine\Tests\Support\WorkerProcess;
use PHPUnit\Framework\TestCase;

/**
 * Real worker processes from tests/fixtures, talked to over fd 3 and fd 4 as the server does.
 */
final class EndToEndTest extends TestCase
{
    private const RAW = __DIR__ . '/fixtures/raw-worker.php';

    public function testABatchWrittenAtOnceIsAnsweredInOrderThenStopEndsWithExit0(): void
    {
        $worker = new WorkerProcess(self::RAW);
        $this->assertSame(PHP_VERSION, $worker->ready());

        $worker->write(
            Frames::get(10, '/a?x=1', [['host', 'h'], ['x-id', 'first'], ['cookie', 'c=1; d=2']])
            . Frames::request(11, 'POST', '/b', [['host', 'h'], ['x-id', 'second'], ['content-type', 'application/x-www-form-urlencoded']], 'f=v&l[]=1')
            . Frames::get(12, '/c', [['host', 'h'], ['x-id', 'third']])
            . Frame::stop()
        );

        $responses = [$worker->readResponse(), $worker->readResponse(), $worker->readResponse()];
        $this->assertSame([10, 11, 12], array_column($responses, 'id'));
        $bodies = array_map(static fn (array $r): array => json_decode($r['body'], true, 512, JSON_THROW_ON_ERROR), $responses);
        $this->assertSame(['first', 'second', 'third'], array_column($bodies, 'id'));
        $this->assertSame(['x' => '1'], $bodies[0]['queryParams']);
        $this->assertSame(['c' => '1', 'd' => '2'], $bodies[0]['cookies']);
        $this->assertSame(['f' => 'v', 'l' => ['1']], $bodies[1]['parsedBody']);
        $this->assertSame([1, 2, 3], array_column($bodies, 'served'), 'one process, bootstrapped once');
        $this->assertSame([0, 1, 2], array_column($bodies, 'resets'), 'a reset hook ran after each request');
        $this->assertSame([['Content-Type', 'application/json'], ['Set-Cookie', 'a=1'], ['Set-Cookie', 'b=2']], $responses[0]['headers']);
        $this->assertSame(0, $worker->wait());
    }

    public function testEndOfInputIsLikeStop(): void
    {
        $worker = new WorkerProcess(self::RAW);
        $worker->ready();
        $worker->write(Frames::get(1, '/'));
        $this->assertSame(200, $worker->readResponse()['status']);

        $this->assertSame(0, $worker->wait());
    }

    public function testLargeBodiesBothWays(): void
    {
        $worker = new WorkerProcess(self::RAW);
        $worker->ready();
        $body = random_bytes(5 << 20);

        // The large frame and a small one behind it in the same write.
        $worker->write(Frames::request(1, 'PUT', '/upload', [['host', 'h']], $body) . Frames::get(2, '/big?mb=5'));

        $echo = json_decode($worker->readResponse()['body'], true, 512, JSON_THROW_ON_ERROR);
        $this->assertSame(\strlen($body), $echo['bodyLength']);
        $this->assertSame(sha1($body), $echo['bodySha1']);
        $big = $worker->readResponse();
        $this->assertSame(2, $big['id']);
        $this->assertSame(str_repeat('0123456789abcdef', 5 << 16), $big['body']);
        $this->assertSame(0, $worker->wait());
    }

    public function testAnExceptionIsA500AndTheWorkerServesTheNextRequest(): void
    {
        $worker = new WorkerProcess(self::RAW);
        $worker->ready();
        $worker->write(Frames::get(1, '/throw') . Frames::get(2, '/after'));

        $failed = $worker->readResponse();
        $this->assertSame(500, $failed['status']);
        $this->assertSame('Internal Server Error', $failed['body']);
        $after = $worker->readResponse();
        $this->assertSame(200, $after['status']);
        $this->assertSame(2, json_decode($after['body'], true)['served']);
        $this->assertSame(0, $worker->wait());
        $this->assertMatchesRegularExpression('{^Uncaught RuntimeException: thrown on purpose in .*raw-worker\.php:\d+ \(request "GET /throw"\)$}m', $worker->errors());
    }

    public function testStrayOutputDoesNotTouchTheFrames(): void
    {
        $worker = new WorkerProcess(self::RAW);
        $worker->ready();
        $worker->write(Frames::get(1, '/print') . Frames::get(2, '/'));

        $this->assertSame('printed', $worker->readResponse()['body']);
        $this->assertSame(200, $worker->readResponse()['status']);
        $this->assertSame(0, $worker->wait());
        $this->assertStringContainsString("stray output\n", $worker->output());
    }

    /** @dataProvider malformedInput */
    public function testMalformedInputGetsAnErrorFrameAndExit70(string $input, string $message): void
    {
        $worker = new WorkerProcess(self::RAW);
        $worker->ready();
        $worker->write($input);
        $worker->closeInput();

        $error = $worker->readFrame();
        $this->assertSame(Frame::ERROR, $error['type'], $error['payload']);
        $this->assertStringContainsString($message, $error['payload']);
        $this->assertSame(70, $worker->wait());
        $this->assertStringContainsString($message, $worker->errors());
    }

    /** @return array<string, array{string, string}> */
    public static function malformedInput(): array
    {
        return [
            'HTTP instead of frames' => ["GET / HTTP/1.1\r\nHost: x\r\n\r\n", 'unsupported protocol version 71 (frame header 47 45 54 20'],
            'unknown type' => [pack('CCvVV', 3, 10, 0, 0, 0), 'unknown frame type 10'],
            'version 2' => [pack('CCvVV', 2, 2, 0, 0, 0), 'unsupported protocol version 2'],
            'version 1' => [pack('CCvVV', 1, 2, 0, 0, 0), 'unsupported protocol version 1'],
            'a frame only the worker sends' => [Frame::ready('8.2'), 'unexpected READY frame'],
            'STOP with a payload' => [Frame::encode(Frame::STOP, 0, 'x'), 'STOP frame with a payload of 1 bytes'],
            'cut short' => [substr(Frames::get(1, '/'), 0, 20), 'end of input inside a frame: 20 bytes read'],
            'request without head length' => [Frame::encode(Frame::REQUEST, 1, 'ab'), 'no head length'],
            'request head too short' => [Frame::encode(Frame::REQUEST, 1, pack('V', 3) . "GET"), 'REQUEST head has 1 fields'],
        ];
    }

    public function testAMalformedFrameAfterGoodOnesInTheSameBatch(): void
    {
        $worker = new WorkerProcess(self::RAW);
        $worker->ready();
        $worker->write(Frames::get(1, '/') . "garbage!garbage!");

        $this->assertSame(1, $worker->readResponse()['id'], 'answered before the garbage is reached');
        $this->assertSame(Frame::ERROR, $worker->readFrame()['type']);
        $this->assertSame(70, $worker->wait());
    }

    public function testOutsideTheServerCreateThrows(): void
    {
        $worker = new WorkerProcess(self::RAW, protocol: false);

        $this->assertSame(255, $worker->wait(), 'an uncaught exception');
        $this->assertStringContainsString('must be started by the peregrine server, e.g. `peregrine serve worker.php`', $worker->errors());
    }

    public function testPsrWorker(): void
    {
        $worker = new WorkerProcess(__DIR__ . '/fixtures/psr-worker.php');
        $worker->ready();
        $worker->write(Frames::request(1, 'POST', '/p?q=1', [['host', 'example.com'], ['content-type', 'application/x-www-form-urlencoded']], 'a=b'));

        $response = $worker->readResponse();
        $this->assertSame([['Content-Type', 'application/json']], $response['headers']);
        $this->assertSame([
            'uri' => 'http://example.com/p?q=1', 'query' => ['q' => '1'], 'parsed' => ['a' => 'b'], 'body' => 'a=b',
        ], json_decode($response['body'], true));
        $this->assertSame(0, $worker->wait());
    }

    public function testGlobalsWorker(): void
    {
        $worker = new WorkerProcess(__DIR__ . '/fixtures/globals-worker.php');
        $worker->ready();
        $worker->write(
            Frames::request(1, 'POST', '/g?q=1', [['host', 'example.com'], ['cookie', 'c=v'], ['content-type', 'application/x-www-form-urlencoded']], 'a=b')
            . Frames::get(2, '/?redirect=1')
        );

        $response = $worker->readResponse();
        $this->assertSame(200, $response['status']);
        $this->assertSame([['Content-type', 'application/json']], $response['headers']);
        $this->assertSame([
            'get' => ['q' => '1'], 'post' => ['a' => 'b'], 'cookie' => ['c' => 'v'],
            'method' => 'POST', 'uri' => '/g?q=1', 'host' => 'example.com', 'input' => 'a=b',
        ], json_decode($response['body'], true));
        $redirect = $worker->readResponse();
        $this->assertSame(302, $redirect['status']);
        $this->assertSame(['Location', '/elsewhere'], $redirect['headers'][0]);
        $this->assertSame(0, $worker->wait());
    }
}
