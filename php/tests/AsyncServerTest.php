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

    private static function request(int $id, string $uri): string
    {
        [$path, $query] = array_pad(explode('?', $uri, 2), 2, '');

        return Frame::request($id, ['GET', $uri, $path, $query, 'HTTP/1.1', '127.0.0.1', '1', '127.0.0.1', '80', 'http', '']);
    }
}
