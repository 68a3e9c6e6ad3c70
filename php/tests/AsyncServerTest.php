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
     * A CANCEL read while the request's fiber is woken (what it awaited completed) but not yet
     * resumed still stops it at its next wait: it ends with DONE alone, at once, not after its
     * minute-long wait (the server would have killed the worker a second after its CANCEL).
     */
    public function testCancelReachesAFiberWokenButNotResumed(): void
    {
        $worker = new WorkerProcess(__DIR__ . '/fixtures/async-worker.php', ['PEREGRINE_CONCURRENCY' => '4']);
        $worker->ready();
        $worker->write(self::request(1, '/?id=1&gate=g&ms=60000') . self::request(2, '/?id=2&open=g'));
        $hints = $worker->readFrame();
        self::assertSame([Frame::HINTS, 2], [$hints['type'], $hints['id']], $worker->errors());
        $worker->write(Frame::encode(9, 1, '')); // read while request 1 is woken, not resumed
        $ended = [];
        for ($i = 0; $i < 3; ++$i) {
            $frame = $worker->readFrame();
            $ended[] = [$frame['type'], $frame['id']];
        }
        sort($ended);
        self::assertSame([[Frame::RESPONSE, 2], [Frame::DONE, 1], [Frame::DONE, 2]], $ended);
        self::assertSame(0, $worker->wait(), $worker->errors());
    }

    /**
     * Failures interleave in a concurrent worker's log: the line of an uncaught exception names
     * its request (method and URI), and an async() that failed with nobody awaiting it is
     * logged with the request it worked for, not lost.
     */
    public function testFailuresAreLoggedWithTheirRequest(): void
    {
        $worker = new WorkerProcess(__DIR__ . '/fixtures/async-worker.php', ['PEREGRINE_CONCURRENCY' => '4']);
        $worker->ready();
        $worker->write(self::request(1, '/?id=1&ms=5&throw=1') . self::request(2, '/?id=2&ms=1&orphan=1'));
        $answers = [$worker->readResponse(), $worker->readResponse()];
        usort($answers, static fn (array $a, array $b): int => $a['id'] <=> $b['id']);
        self::assertSame([500, 200], array_column($answers, 'status'));
        self::assertSame(0, $worker->wait(), $worker->errors());
        self::assertMatchesRegularExpression('{^Uncaught RuntimeException: thrown after the wait in \S+async-worker\.php:\d+ \(request "GET /\?id=1&ms=5&throw=1"\)$}m', $worker->errors());
        self::assertMatchesRegularExpression('{^peregrine: a Future failed and nobody awaited it \(request /\): Uncaught RuntimeException: nobody awaited me in \S+async-worker\.php:\d+$}m', $worker->errors());
    }

    /**
     * A CANCEL read after the request's fiber ended but before its DONE went out: the answer
     * and one DONE go out (the server drops the answer), and the worker goes on.
     */
    public function testCancelOfARequestThatJustEndedEndsItOnce(): void
    {
        $worker = new WorkerProcess(__DIR__ . '/fixtures/async-worker.php', ['PEREGRINE_CONCURRENCY' => '4']);
        $worker->ready();
        $worker->write(self::request(2, '/?id=2&open=nobody'));
        $hints = $worker->readFrame();
        self::assertSame([Frame::HINTS, 2], [$hints['type'], $hints['id']], $worker->errors());
        $worker->write(Frame::encode(9, 2, '') . self::request(3, '/?id=3&ms=0')); // read as its fiber ends
        $ended = $worker->readResponse();
        self::assertSame([2, 200, 'id=2'], [$ended['id'], $ended['status'], $ended['body']]);
        $next = $worker->readResponse(); // no second DONE for 2 before it
        self::assertSame([3, 200], [$next['id'], $next['status']]);
        self::assertSame(0, $worker->wait(), $worker->errors());
    }

    /**
     * Every request runs in a new Fiber: what a library keeps per fiber (a WeakMap keyed by
     * Fiber::getCurrent(), the current user) is not seen by a later request.
     */
    public function testEveryRequestRunsInAFiberOfItsOwn(): void
    {
        $worker = new WorkerProcess(__DIR__ . '/fixtures/async-worker.php', ['PEREGRINE_CONCURRENCY' => '4']);
        $worker->ready();
        for ($id = 1; $id <= 5; ++$id) {
            $worker->write(self::request($id, "/?id=$id&fiber=1"));
            $answer = $worker->readResponse();
            self::assertSame([$id, 'fresh'], [$answer['id'], $answer['body']]);
        }
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
