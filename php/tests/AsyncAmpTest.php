<?php

declare(strict_types=1);

namespace Peregrine\Tests;

use Peregrine\Async\Internal\Amp;
use Peregrine\Async\Internal\AmpDriver;
use Peregrine\Async\Internal\Loop;
use PHPUnit\Framework\TestCase;

use function Peregrine\Async\async;
use function Peregrine\Async\await;
use function Peregrine\Async\awaitAll;
use function Peregrine\Async\delay;

/**
 * Amp v2 (Debian's php-amphp-amp) on Peregrine's loop.
 */
final class AsyncAmpTest extends TestCase
{
    protected function setUp(): void
    {
        if (!is_file('/usr/share/php/Amp/autoload.php')) {
            self::markTestSkipped('php-amphp-amp is not installed');
        }
        // Debian's autoload.php leaves out the function files Composer would load.
        require_once '/usr/share/php/Amp/autoload.php';
        require_once '/usr/share/php/Amp/functions.php';
        require_once '/usr/share/php/Amp/Internal/functions.php';
        self::assertTrue(Amp::install(Loop::get()));
        self::assertInstanceOf(AmpDriver::class, \Amp\Loop::get());
    }

    public function testAwaitAnAmpCoroutine(): void
    {
        $promise = \Amp\call(static function (): \Generator {
            yield \Amp\delay(2);
            $x = yield new \Amp\Success(40);

            return $x + 2;
        });
        self::assertSame(42, await($promise));
    }

    public function testAmpAndFibersInterleave(): void
    {
        $log = [];
        $amp = \Amp\call(static function () use (&$log): \Generator {
            $log[] = 'amp start';
            yield \Amp\delay(20);
            $log[] = 'amp end';

            return 'amp';
        });
        $fiber = async(static function () use (&$log): string {
            $log[] = 'fiber start';
            delay(0.002);
            $log[] = 'fiber end';

            return 'fiber';
        });
        self::assertSame(['amp', 'fiber'], awaitAll([$amp, $fiber]));
        self::assertSame(['amp start', 'fiber start', 'fiber end', 'amp end'], $log);
    }

    public function testAmpReadableWatcherRunsOnTheLoop(): void
    {
        [$a, $b] = stream_socket_pair(STREAM_PF_UNIX, STREAM_SOCK_STREAM, STREAM_IPPROTO_IP);
        $deferred = new \Amp\Deferred();
        \Amp\Loop::onReadable($a, static function (string $id, $stream) use ($deferred): void {
            \Amp\Loop::cancel($id);
            $deferred->resolve(fread($stream, 10));
        });
        async(static function () use ($b): void {
            delay(0.001);
            fwrite($b, 'hello');
        });
        self::assertSame('hello', await($deferred->promise()));
        fclose($a);
        fclose($b);
    }

    public function testAFailedPromiseThrows(): void
    {
        $this->expectException(\DomainException::class);
        await(new \Amp\Failure(new \DomainException('no')));
    }

    public function testPromiseWaitRunsOnPeregrinesLoop(): void
    {
        $fired = false;
        Loop::get()->delay(0.001, static function () use (&$fired): void {
            $fired = true;
        });
        self::assertSame(7, \Amp\Promise\wait(\Amp\call(static function (): \Generator {
            yield \Amp\delay(10);

            return 7;
        })));
        self::assertTrue($fired);
    }

    public function testSettleRunsAGeneratorHandler(): void
    {
        $handler = static function (): \Generator {
            yield \Amp\delay(1);

            return 'response';
        };
        self::assertSame('response', Amp::settle($handler()));
        self::assertSame('plain', Amp::settle('plain'));
    }
}
