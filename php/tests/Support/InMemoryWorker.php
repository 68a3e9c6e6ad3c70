<?php

declare(strict_types=1);

namespace Peregrine\Tests\Support;

use Peregrine\Internal\Connection;
use Peregrine\Internal\Frame;
use Peregrine\Worker;
use PHPUnit\Framework\Assert;

/**
 * InMemoryWorker runs a Worker inside the test process: its input is a string of frames, its
 * output and log are memory streams. serve*() returns at the end of the input like at STOP.
 */
final class InMemoryWorker
{
    public readonly Worker $worker;
    /** @var resource */
    private $out;
    /** @var resource */
    private $log;

    public function __construct(string $input)
    {
        $in = fopen('php://memory', 'w+b');
        fwrite($in, $input);
        rewind($in);
        $this->out = fopen('php://memory', 'w+b');
        $this->log = fopen('php://memory', 'w+b');
        // The constructor is private: create() only connects to a real server.
        $class = new \ReflectionClass(Worker::class);
        $worker = $class->newInstanceWithoutConstructor();
        $class->getConstructor()->invoke($worker, new Connection($in, $this->out), $this->log);
        $this->worker = $worker;
    }

    /**
     * The RESPONSE frames written, after checking that READY came first.
     *
     * @return list<array{id: int, status: int, headers: list<array{string, string}>, body: string}>
     */
    public function responses(): array
    {
        $frames = Frames::split($this->written());
        Assert::assertNotEmpty($frames, 'no READY frame');
        $ready = array_shift($frames);
        Assert::assertSame(Frame::READY, $ready['type']);
        Assert::assertSame(PHP_VERSION, $ready['payload']);
        return Frames::answers($frames);
    }

    /** Everything the worker wrote to the server, raw. */
    public function written(): string
    {
        rewind($this->out);

        return (string) stream_get_contents($this->out);
    }

    /** @return list<string> the lines reported on the log */
    public function log(): array
    {
        rewind($this->log);
        $log = (string) stream_get_contents($this->log);

        return $log === '' ? [] : explode("\n", rtrim($log, "\n"));
    }
}
