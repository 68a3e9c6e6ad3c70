<?php

declare(strict_types=1);

namespace Peregrine\Tests;

use Peregrine\Internal\Frame;
use Peregrine\Tests\Support\WorkerProcess;
use PHPUnit\Framework\TestCase;

/**
 * The concurrent request loop (Async\Internal\Server) on the cli runtime: requests written
 * without waiting, each in a fiber, answers in the order they are ready.
 */
final class AsyncServerTest extends TestCase
{
    public function testRequestsRunSideBySideAndAnswerInAnyOrder(): void
    {
        $worker = new WorkerProcess(__DIR__ . '/fixtures/async-worker.php', ['PEREGRINE_CONCURRENCY' => '16']);
        $worker->ready();
        $requests = '';
        for ($id = 1; $id <= 16; ++$id) {
            $requests .= self::request($id, '/?id=' . $id . '&ms=' . ((17 - $id) * 3));
        }
        $worker->write($requests);
        $order = [];
        for ($i = 0; $i < 16; ++$i) {
            $answer = $worker->readResponse();
            self::assertSame(200, $answer['status']);
            self::assertSame('id=' . $answer['id'], $answer['body']);
            $order[] = $answer['id'];
        }
        sort($order);
        self::assertSame(range(1, 16), $order);
        self::assertSame(0, $worker->wait(), $worker->errors());
    }

    public function testTheLongestWaitIsNotAnsweredFirst(): void
    {
        $worker = new WorkerProcess(__DIR__ . '/fixtures/async-worker.php', ['PEREGRINE_CONCURRENCY' => '4']);
        $worker->ready();
        $worker->write(self::request(1, '/?id=1&ms=200') . self::request(2, '/?id=2&ms=0'));
        self::assertSame(2, $worker->readResponse()['id']);
        self::assertSame(1, $worker->readResponse()['id']);
        self::assertSame(0, $worker->wait(), $worker->errors());
    }

    public function testCancelEndsARequestWithDoneAlone(): void
    {
        $worker = new WorkerProcess(__DIR__ . '/fixtures/async-worker.php', ['PEREGRINE_CONCURRENCY' => '4']);
        $worker->ready();
        $worker->write(self::request(1, '/?id=1&ms=60000') . self::request(2, '/?id=2&ms=0'));
        self::assertSame(2, $worker->readResponse()['id']);
        $worker->write(Frame::encode(9, 1, ''));
        $done = $worker->readFrame();
        self::assertSame([Frame::DONE, 1], [$done['type'], $done['id']]);
        self::assertSame(0, $worker->wait(), $worker->errors());
    }

    /**
     * earlyHints() in a request's fiber, before or after it waited, or in an async() fiber of it,
     * sends HINTS with that request's id while other requests run in between.
     */
    public function testEarlyHintsGoToTheRequestWhoseFiberSendsThem(): void
    {
        $worker = new WorkerProcess(__DIR__ . '/fixtures/async-worker.php', ['PEREGRINE_CONCURRENCY' => '8']);
        $worker->ready();
        $worker->write(self::request(1, '/?id=1&ms=60&hint=after') . self::request(2, '/?id=2&ms=30&hint=before')
            . self::request(3, '/?id=3&ms=0&hint=async') . self::request(4, '/?id=4&ms=10'));
        $hinted = [];
        $answered = [];
        while (\count($answered) < 4) {
            $frame = $worker->readFrame();
            if ($frame['type'] === Frame::HINTS) {
                self::assertArrayNotHasKey($frame['id'], $answered, 'a HINTS frame after its answer');
                self::assertSame("Link\0</{$frame['id']}.css>; rel=preload; as=style", $frame['payload']);
                $hinted[] = $frame['id'];
            } elseif ($frame['type'] === Frame::DONE) {
                $answered[$frame['id']] = true;
            }
        }
        sort($hinted);
        self::assertSame([1, 2, 3], $hinted);
        self::assertSame(0, $worker->wait(), $worker->errors());
    }

    /**
     * A fatal error in one request's fiber ends the process; its last word, DONE with LAST,
     * names that request (the server answers it 500), not the last one that ended.
     */
    public function testTheLastWordNamesTheRequestAFatalErrorStopped(): void
    {
        $worker = new WorkerProcess(__DIR__ . '/fixtures/async-worker.php', ['PEREGRINE_CONCURRENCY' => '8']);
        $worker->ready();
        $worker->write(self::request(1, '/?id=1&ms=0'));
        self::assertSame(1, $worker->readResponse()['id']);
        $worker->write(self::request(2, '/?id=2&ms=60000') . self::request(3, '/?id=3&ms=20&fatal=1') . self::request(4, '/?id=4&ms=60000'));
        $done = $worker->readFrame();
        self::assertSame([Frame::DONE, 3, Frame::FLAG_LAST], [$done['type'], $done['id'], $done['flags']], $worker->errors());
        // Its payload is the last REQUEST it read: 4, written with 2 and 3, fails with it.
        self::assertSame(pack('V', 4), $done['payload']);
        self::assertSame(255, $worker->wait());
        self::assertStringContainsString('Allowed memory size', $worker->errors());
    }

    /**
     * session_start() in a concurrent request fails that request with an error naming
     * workers.concurrency (PHP's session would be shared by every request in flight); the
     * others and the worker go on.
     */
    public function testSessionStartFailsItsRequest(): void
    {
        $worker = new WorkerProcess(__DIR__ . '/fixtures/async-worker.php', ['PEREGRINE_CONCURRENCY' => '8']);
        $worker->ready();
        $worker->write(self::request(1, '/?id=1&ms=30') . self::request(2, '/?id=2&ms=0&session=1'));
        $failed = $worker->readResponse();
        self::assertSame([2, 500], [$failed['id'], $failed['status']]);
        $other = $worker->readResponse();
        self::assertSame([1, 200], [$other['id'], $other['status']]);
        self::assertSame(0, $worker->wait(), $worker->errors());
        self::assertStringContainsString('session_start() in a concurrent worker (workers.concurrency is 8)', $worker->errors());
    }

    private static function request(int $id, string $uri): string
    {
        [$path, $query] = array_pad(explode('?', $uri, 2), 2, '');

        return Frame::request($id, ['GET', $uri, $path, $query, 'HTTP/1.1', '127.0.0.1', '1', '127.0.0.1', '80', 'http', '']);
    }
}
