<?php

declare(strict_types=1);

namespace Peregrine\Internal;

use Psr\Http\Server\RequestHandlerInterface;

/**
 * Handling holds what both request loops (Peregrine\Worker on the cli runtime, NativeServer on
 * the native one) do alike with a user's handler: take a PSR handler in any of its accepted
 * shapes, describe what it threw in one log line, and decide whether a 500 may show the trace.
 *
 * @internal
 */
final class Handling
{
    /**
     * A PSR-15 handler, an object shaped like one (when psr/http-server-handler is absent,
     * instanceof an unknown interface is simply false), or a callable, as a closure.
     *
     * @return \Closure(\Psr\Http\Message\ServerRequestInterface): mixed
     *
     * @throws \InvalidArgumentException for anything else
     */
    public static function psrHandler(callable|object $handler): \Closure
    {
        if ($handler instanceof RequestHandlerInterface || (!\is_callable($handler) && method_exists($handler, 'handle'))) {
            return $handler->handle(...);
        }
        if (\is_callable($handler)) {
            return \Closure::fromCallable($handler);
        }
        throw new \InvalidArgumentException(sprintf('servePsr() needs a callable or an object with a handle() method, %s given',
            get_debug_type($handler)));
    }

    /** One line saying what was thrown and where. */
    public static function describe(\Throwable $e): string
    {
        return 'Uncaught ' . $e::class . ': ' . $e->getMessage() . ' in ' . $e->getFile() . ':' . $e->getLine();
    }

    /**
     * Whether error_get_last() says the script ended in a fatal error (the ones that end a
     * request under PHP-FPM with 500).
     *
     * @param array{type: int, message: string, file: string, line: int}|null $error
     */
    public static function isFatal(?array $error): bool
    {
        return $error !== null
            && ($error['type'] & (E_ERROR | E_PARSE | E_CORE_ERROR | E_COMPILE_ERROR | E_USER_ERROR | E_RECOVERABLE_ERROR)) !== 0;
    }

    /** Whether a 500 response may show the trace: APP_DEBUG is truthy or PEREGRINE_DEBUG is 1. */
    public static function debug(): bool
    {
        if (getenv('PEREGRINE_DEBUG') === '1') {
            return true;
        }
        // Not $_SERVER: naming it would make the native runtime register it for every request
        // from then on (auto_globals_jit). The environment and $_ENV (Dotenv sets both) say it.
        $value = $_ENV['APP_DEBUG'] ?? getenv('APP_DEBUG');

        return \is_scalar($value) && filter_var($value, FILTER_VALIDATE_BOOL);
    }
}
