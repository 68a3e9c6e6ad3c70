<?php

declare(strict_types=1);

namespace Peregrine\Async\Internal;

use Amp\Coroutine;
use Amp\Promise;
use Peregrine\Async\Future;

/**
 * Amp joins Amp v2 (Debian's php-amphp-amp) to Peregrine's loop when the application loaded
 * it: AmpDriver becomes Amp's loop driver, Amp promises become Futures, and a handler may
 * return a promise or be a generator coroutine. Nothing here loads Amp.
 *
 * @internal
 */
final class Amp
{
    /** Makes AmpDriver the driver of Amp\Loop when Amp is loaded; returns whether it did. */
    public static function install(Loop $loop): bool
    {
        if (!class_exists(\Amp\Loop::class)) {
            return false;
        }
        if (!\Amp\Loop::get() instanceof AmpDriver) {
            \Amp\Loop::set(new AmpDriver($loop));
        }

        return true;
    }

    /**
     * A Future completed by an Amp promise.
     */
    public static function future(Promise $promise): Future
    {
        $future = new Future();
        $promise->onResolve(static function (?\Throwable $e, mixed $value) use ($future): void {
            $e === null ? $future->resolve($value) : $future->fail($e);
        });

        return $future;
    }

    /**
     * What a handler returned, with an Amp promise or a generator coroutine (Aerys style) run
     * to its value.
     */
    public static function settle(mixed $value): mixed
    {
        if ($value instanceof \Generator && class_exists(Coroutine::class)) {
            $value = new Coroutine($value);
        }
        if (interface_exists(Promise::class, false) && $value instanceof Promise) {
            return \Peregrine\Async\await($value);
        }

        return $value;
    }

}
