<?php

declare(strict_types=1);

namespace Peregrine\Laravel;

use Illuminate\Contracts\Foundation\Application;
use Illuminate\Contracts\Http\Kernel;
use Illuminate\Http\Request;
use Peregrine\Internal\FrontController;

/**
 * Server serves a Laravel application in worker mode on Peregrine's native runtime: the
 * application boots once, each request runs through the HTTP kernel as public/index.php would
 * run it under PHP-FPM, and afterwards the Sandbox puts the application back as it was after
 * boot.
 *
 *     boot(APP_DIR): bootstrap/app.php, the kernel's bootstrappers, common services resolved,
 *                    the sandbox captured
 *     serve():  peregrine_handle_request(
 *                   Request::capture() -> kernel->handle() -> response->send()
 *                   (the answer leaves here: send() calls fastcgi_finish_request())
 *                   -> kernel->terminate(): terminable middleware, terminating callbacks
 *               ) -> sandbox->restore() -> next request
 *
 * The request is PHP's own (superglobals, php://input, uploads), the response goes out through
 * header() and echo, so nothing in the application changes. An exit() in a request ends that
 * request; the sandbox is restored all the same.
 */
final class Server
{
    /** Services resolved at boot, so that each request finds them ready (as Octane warms them). */
    private const WARM = [
        'auth', 'cache', 'cache.store', 'config', 'cookie', 'db', 'db.factory', 'encrypter', 'events',
        'files', 'hash', 'log', 'router', 'routes', 'session', 'translator', 'url', 'validator', 'view',
        'blade.compiler', 'Illuminate\Contracts\Auth\Access\Gate',
    ];

    private function __construct(
        private readonly Application $app,
        private readonly Kernel $kernel,
        private readonly Sandbox $sandbox,
        private readonly ?LeakReport $leaks,
        private readonly string $public,
    ) {
    }

    /**
     * Boots the application of the Laravel project in $appDir (its bootstrap/app.php) and takes
     * the state the sandbox restores after each request.
     *
     * @throws \RuntimeException if $appDir has no bootstrap/app.php returning an application
     */
    public static function boot(string $appDir): self
    {
        $file = rtrim($appDir, '/') . '/bootstrap/app.php';
        if (!is_file($file)) {
            throw new \RuntimeException("{$file} not found: --laravel wants the directory of a Laravel application");
        }
        if (!\defined('LARAVEL_START')) {
            \define('LARAVEL_START', microtime(true));
        }
        $app = require $file;
        if (!$app instanceof Application) {
            throw new \RuntimeException("{$file} returned " . get_debug_type($app) . ', not a Laravel application');
        }
        // Under FPM the providers boot with the request bound; here there is none yet, so a
        // neutral one stands in (services that keep it are given each request's when it comes).
        $app->instance('request', Request::create('http://localhost/'));
        $kernel = $app->make(Kernel::class);
        $kernel->bootstrap();
        foreach (self::WARM as $id) {
            if ($app->bound($id)) {
                try {
                    $app->make($id);
                } catch (\Throwable) {
                    // A service the app cannot build yet (no key, no driver) is built per request.
                }
            }
        }
        $keep = $app['config']->get('peregrine.keep', []);

        $leaks = getenv('PEREGRINE_DEBUG_LEAKS') === '1' ? new LeakReport() : null;

        return new self($app, $kernel, Sandbox::capture($app, \is_array($keep) ? array_values($keep) : []), $leaks,
            $app->make('path.public'));
    }

    /** The booted application, for worker scripts that add to it before serving. */
    public function application(): Application
    {
        return $this->app;
    }

    /**
     * Serves requests until the server says stop.
     *
     * @throws \RuntimeException if the worker does not run on the native runtime
     */
    public function serve(): void
    {
        if (!\function_exists('peregrine_handle_request')) {
            throw new \RuntimeException('Laravel in worker mode needs the native runtime (workers.runtime: native, bin/peregrine-php)');
        }
        $handle = $this->handle(...);
        while (\peregrine_handle_request($handle)) {
            $this->leaks?->before($this->sandbox);
            $this->sandbox->restore();
            $this->leaks?->after();
        }
    }

    private function handle(): void
    {
        FrontController::describe($this->public);
        $request = Request::capture();
        $response = $this->kernel->handle($request);
        // send() ends with fastcgi_finish_request(): the client has its answer before terminate().
        $response->send();
        $this->kernel->terminate($request, $response);
    }
}
