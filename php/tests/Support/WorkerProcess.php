<?php

declare(strict_types=1);

namespace Peregrine\Tests\Support;

use Peregrine\Internal\Frame;
use PHPUnit\Framework\Assert;

/**
 * WorkerProcess runs a PHP worker script the way the server does: fd 3 carries frames to it,
 * fd 4 frames from it, PEREGRINE_PROTOCOL=3 is in its environment.
 */
final class WorkerProcess
{
    /** A guard against a hung worker, never a wait for a state: reads return as soon as data is there. */
    private const TIMEOUT_SECONDS = 20;

    /** @var resource */
    private $process;
    /** @var resource */
    private $in;
    /** @var resource */
    private $out;
    private string $buffer = '';
    private readonly string $stdout;
    private readonly string $stderr;

    /**
     * @param array<string, string> $env added to the test's environment
     */
    public function __construct(string $script, array $env = [], bool $protocol = true)
    {
        $env = array_merge(getenv(), $env);
        if ($protocol) {
            $env['PEREGRINE_PROTOCOL'] = '3';
        } else {
            unset($env['PEREGRINE_PROTOCOL']);
        }
        $this->stdout = tempnam(sys_get_temp_dir(), 'peregrine-stdout-');
        $this->stderr = tempnam(sys_get_temp_dir(), 'peregrine-stderr-');
        $process = proc_open(
            [PHP_BINARY, '-d', 'display_errors=stderr', '-d', 'error_reporting=-1', $script],
            [
                0 => ['file', '/dev/null', 'r'],
                1 => ['file', $this->stdout, 'w'],
                2 => ['file', $this->stderr, 'w'],
                3 => ['pipe', 'r'],
                4 => ['pipe', 'w'],
            ],
            $pipes,
            null,
            $env,
        );
        Assert::assertIsResource($process, "cannot start $script");
        $this->process = $process;
        $this->in = $pipes[3];
        $this->out = $pipes[4];
    }

    public function write(string $bytes): void
    {
        Assert::assertSame(\strlen($bytes), fwrite($this->in, $bytes));
    }

    /** Closes fd 3: end of input, which the worker must take as STOP. */
    public function closeInput(): void
    {
        if (\is_resource($this->in)) {
            fclose($this->in);
        }
    }

    /** @return array{type: int, id: int, flags: int, payload: string} */
    public function readFrame(): array
    {
        $header = $this->read(Frame::HEADER_SIZE);
        $h = unpack(Frame::HEADER_FORMAT, $header);
        Assert::assertSame(Frame::VERSION, $h['version'], 'frame version; stderr: ' . $this->errors());

        return ['type' => $h['type'], 'id' => $h['id'], 'flags' => $h['flags'], 'payload' => $this->read($h['length'])];
    }

    /** Reads the READY frame every worker starts with and returns its payload. */
    public function ready(): string
    {
        $frame = $this->readFrame();
        Assert::assertSame(Frame::READY, $frame['type'], 'first frame; stderr: ' . $this->errors());

        return $frame['payload'];
    }

    /** @return array{id: int, status: int, headers: list<array{string, string}>, body: string} */
    public function readResponse(): array
    {
        $frame = $this->readFrame();
        Assert::assertSame(Frame::RESPONSE, $frame['type'], 'frame type; payload: ' . substr($frame['payload'], 0, 200));
        $answer = ['id' => $frame['id']] + Frames::response($frame['payload']);
        while (($frame['flags'] & Frame::FLAG_MORE) !== 0) {
            $frame = $this->readFrame();
            Assert::assertSame(Frame::BODY, $frame['type'], 'a BODY frame after FLAG_MORE');
            Assert::assertSame($answer['id'], $frame['id']);
            $answer['body'] .= $frame['payload'];
        }
        $done = $this->readFrame();
        Assert::assertSame(Frame::DONE, $done['type'], 'the DONE frame after an answer');
        Assert::assertSame($answer['id'], $done['id'], 'the DONE frame names the request');
        $answer['last'] = ($done['flags'] & Frame::FLAG_LAST) !== 0;

        return $answer;
    }

    /** Asserts that the worker wrote nothing more, then waits for its exit status. */
    public function wait(): int
    {
        $this->closeInput();
        $rest = stream_get_contents($this->out);
        Assert::assertSame('', $rest, 'bytes after the last expected frame');
        fclose($this->out);

        return proc_close($this->process);
    }

    public function errors(): string
    {
        return (string) file_get_contents($this->stderr);
    }

    public function output(): string
    {
        return (string) file_get_contents($this->stdout);
    }

    public function __destruct()
    {
        if (\is_resource($this->process)) {
            proc_terminate($this->process, 9);
            proc_close($this->process);
        }
        @unlink($this->stdout);
        @unlink($this->stderr);
    }

    private function read(int $length): string
    {
        while (\strlen($this->buffer) < $length) {
            $read = [$this->out];
            $none = null;
            $ready = stream_select($read, $none, $none, self::TIMEOUT_SECONDS);
            Assert::assertSame(1, $ready, 'no frame from the worker within ' . self::TIMEOUT_SECONDS . 's; stderr: ' . $this->errors());
            $chunk = fread($this->out, max(65536, $length - \strlen($this->buffer)));
            Assert::assertNotSame('', $chunk, 'worker closed fd 4 early; stderr: ' . $this->errors());
            Assert::assertIsString($chunk);
            $this->buffer .= $chunk;
        }
        $data = substr($this->buffer, 0, $length);
        $this->buffer = (string) substr($this->buffer, $length);

        return $data;
    }
}
