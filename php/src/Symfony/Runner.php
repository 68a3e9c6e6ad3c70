<?php

declare(strict_types=1);

namespace Peregrine\Symfony;

use Peregrine\Internal\FrontController;
use Peregrine\Internal\LeakReport;
use Symfony\Component\DependencyInjection\Container;
use Symfony\Component\HttpFoundation\Request;
use Symfony\Component\HttpFoundation\Session\SessionInterface;
use Symfony\Component\HttpKernel\HttpKernelInterface;
use Symfony\Component\HttpKernel\Kernel;
use Symfony\Component\HttpKernel\TerminableInterface;
use Symfony\Component\Runtime\RunnerInterface;
use Symfony\Contracts\Service\ResetInterface;

/**
 * Runner serves requests with one Symfony HTTP kernel, booted before the first request and kept
 * for the life of the worker, on Peregrine's native runtime:
 *
 *     peregrine_handle_request(
 *         Request::createFromGlobals() -> kernel->handle() -> response->send()
 *         (send() calls fastcgi_finish_request(): the client has the whole answer, streamed
 *         or a file, before kernel.terminate)
 *         -> kernel->terminate()
 *     ) -> the next request
 *
 * After each request the runner resets the kernel's services itself: the services_resetter
 * (every service tagged kernel.reset: the security token, the request stack, Monolog buffers,
 * Doctrine's entity managers...), then forgets the sessions the container holds, then marks the
 * kernel as having no request in flight. Symfony's Kernel would reset at the start of the next
 * handle() on its own, but only when its count of requests in flight is back to 0, which an
 * exit() in a controller prevents for good (exit skips the finally that counts down): from then
 * on it would never reset again. A kernel that is not Symfony's but implements ResetInterface
 * has reset() called after each request.
 *
 * The sessions: Symfony 5.4 keeps the Session it makes for the first request as a shared
 * service (the deprecated `session`) and hands it to every later request, and its
 * NativeSessionStorage applies the framework's session options (session.cache_limiter "",
 * use_strict_mode, lazy_write, ...) with ini_set() only when it is built. The native runtime
 * puts ini settings back after each request, so from the second request on php.ini's values
 * were in force: PHP's no-cache headers on every answer, and no strict mode (a session id the
 * client made up was taken). Forgotten, the Session and its storage are built again by the
 * request that uses one, as under PHP-FPM.
 *
 * With workers.debug_leaks (PEREGRINE_DEBUG_LEAKS=1) a LeakReport logs, after each reset, the
 * static properties and globals the request changed that no reset put back, and the worker's
 * memory.
 */
final class Runner implements RunnerInterface
{
    /** @param string $public the public directory whose index.php the requests stand for */
    public function __construct(
        private readonly HttpKernelInterface $kernel,
        private readonly string $public,
    ) {
    }

    public function run(): int
    {
        $kernel = $this->kernel;
        $public = $this->public;
        $handle = static function () use ($kernel, $public): void {
            FrontController::describe($public);
            $request = Request::createFromGlobals();
            $response = $kernel->handle($request);
            $response->send();
            if ($kernel instanceof TerminableInterface) {
                $kernel->terminate($request, $response);
            }
        };
        // Booted here, not by the first request: what the boot sets with ini_set() then belongs
        // to the worker, where the native runtime would put it back after that request; and a
        // kernel that cannot boot fails the worker's start, with its error, not a request.
        if ($kernel instanceof Kernel) {
            $kernel->boot();
        }
        $reset = self::resetter($kernel);
        $leaks = getenv('PEREGRINE_DEBUG_LEAKS') === '1' ? new LeakReport() : null;
        while (\peregrine_handle_request($handle)) {
            $reset();
            $leaks?->after();
        }

        return 0;
    }

    /** @return \Closure(): void what puts the kernel's services back between two requests */
    private static function resetter(HttpKernelInterface $kernel): \Closure
    {
        if ($kernel instanceof Kernel) {
            $settle = \Closure::bind(static function (Kernel $kernel): void {
                $kernel->requestStackSize = 0;
                $kernel->resetServices = false;
            }, null, Kernel::class);
            $forgetSessions = \Closure::bind(static function (Container $container): void {
                foreach (['services', 'privates'] as $map) {
                    foreach ($container->{$map} as $id => $service) {
                        if ($service instanceof SessionInterface) {
                            unset($container->{$map}[$id]);
                        }
                    }
                }
            }, null, Container::class);

            return static function () use ($kernel, $settle, $forgetSessions): void {
                try {
                    $container = $kernel->getContainer();
                } catch (\LogicException) {
                    return; // the request failed before the kernel booted: nothing to reset
                }
                if ($container->has('services_resetter')) {
                    $container->get('services_resetter')->reset();
                }
                if ($container instanceof Container) {
                    $forgetSessions($container);
                }
                $settle($kernel);
            };
        }
        if ($kernel instanceof ResetInterface) {
            return $kernel->reset(...);
        }

        return static function (): void {
        };
    }
}
