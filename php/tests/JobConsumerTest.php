<?php

declare(strict_types=1);

namespace Peregrine\Tests;

use Peregrine\Http\Request;
use Peregrine\Internal\JobConsumer;
use Peregrine\Jobs;
use Peregrine\Jobs\Job;
use Peregrine\KV;
use PHPUnit\Framework\TestCase;

final class JobConsumerTest extends TestCase
{
    private static function jobRequest(string $body, array $headers = []): Request
    {
        return new Request(method: 'JOB', uri: '/emails', headers: $headers + [
            'x-peregrine-job-id' => ['0123456789abcdef0123456789abcdef'],
            'x-peregrine-job-pipeline' => ['emails'],
            'x-peregrine-job-attempt' => ['2'],
            'x-peregrine-job-headers' => ['{"trace":"t1"}'],
        ], body: $body);
    }

    public function testAJobRequestBecomesAJob(): void
    {
        $seen = null;
        $response = JobConsumer::handler(static function (Job $job) use (&$seen): void {
            $seen = $job;
        })(self::jobRequest('{"to":"a@example.org","n":[1,2]}'));

        $this->assertSame(200, $response->status);
        $this->assertSame('done', $response->headers['x-peregrine-job'] ?? null);
        $this->assertInstanceOf(Job::class, $seen);
        $this->assertSame('0123456789abcdef0123456789abcdef', $seen->id);
        $this->assertSame('emails', $seen->pipeline);
        $this->assertSame(['to' => 'a@example.org', 'n' => [1, 2]], $seen->payload);
        $this->assertSame(['trace' => 't1'], $seen->headers);
        $this->assertSame(2, $seen->attempt);
    }

    public function testAThrowFailsTheAttemptWithItsDescription(): void
    {
        $response = @JobConsumer::handler(static function (): void {
            throw new \DomainException('no mailbox');
        })(self::jobRequest('1'));

        $this->assertSame(500, $response->status);
        $this->assertStringContainsString('DomainException: no mailbox', (string) $response->body);
    }

    public function testAPayloadThatIsNotJsonFailsTheAttempt(): void
    {
        $called = false;
        $response = @JobConsumer::handler(static function () use (&$called): void {
            $called = true;
        })(self::jobRequest('{nope'));

        $this->assertSame(500, $response->status);
        $this->assertFalse($called);
    }

    public function testAnHttpRequestNeverReachesTheConsumer(): void
    {
        $called = false;
        $response = JobConsumer::handler(static function () use (&$called): void {
            $called = true;
        })(new Request(method: 'GET', uri: '/'));

        $this->assertSame(400, $response->status);
        $this->assertFalse($called);
    }

    public function testWithoutAServerPushAndKvSaySo(): void
    {
        $previous = getenv('PEREGRINE_CALL_SOCKET');
        putenv('PEREGRINE_CALL_SOCKET');
        try {
            $this->expectExceptionMessage('PEREGRINE_CALL_SOCKET is not set');
            Jobs::push('emails', ['x' => 1]);
        } finally {
            if ($previous !== false) {
                putenv('PEREGRINE_CALL_SOCKET=' . $previous);
            }
        }
    }

    public function testKvStoreIsLazy(): void
    {
        $this->assertInstanceOf(KV::class, KV::store('anything'));
    }
}
