<?php
// Laravel under Peregrine: the application and its HTTP kernel boot once per worker; each request
// is handed to the kernel through the superglobals (serveGlobals), the way public/index.php gets it
// under PHP-FPM, and the kernel's response is turned into the status, headers and body.
//
// The application outlives the request, so whatever it keeps about the user must be forgotten
// after each one, or the next client inherits it: the auth guards (their resolved user), the
// session store, the queued cookies. This is the least a worker must reset; the full Laravel
// integration (peregrine serve --laravel) resets more.
declare(strict_types=1);

require __DIR__ . '/../../../php/autoload.php';

use Illuminate\Contracts\Http\Kernel;
use Illuminate\Http\Request;
use Illuminate\Support\Facades\Facade;

$app = require __DIR__ . '/bootstrap/app.php';
$kernel = $app->make(Kernel::class);
$kernel->bootstrap();

// The integration tests add routes here (integration/security_test.go); unset in the benchmark.
$extra = getenv('PEREGRINE_LARAVEL_TEST_BOOT');
if (\is_string($extra) && $extra !== '') {
    require $extra;
}

// Forgets what one request left in the long-lived application.
$forgetRequest = static function () use ($app): void {
    if ($app->resolved('auth')) {
        $app['auth']->forgetGuards();
    }
    if ($app->resolved('session')) {
        $app['session']->forgetDrivers();
    }
    $app->forgetInstance('session.store');
    if ($app->resolved('cookie')) {
        $app['cookie']->flushQueuedCookies();
    }
    $app->forgetInstance('request');
    Facade::clearResolvedInstance('request');
    Facade::clearResolvedInstance('session.store');
};

Peregrine\Worker::create()->serveGlobals(static function () use ($kernel, $forgetRequest): void {
    try {
        $request = Request::capture();
        $response = $kernel->handle($request);

        http_response_code($response->getStatusCode());
        foreach ($response->headers->allPreserveCaseWithoutCookies() as $name => $values) {
            foreach ($values as $value) {
                Peregrine\Http\header($name . ': ' . $value, false);
            }
        }
        foreach ($response->headers->getCookies() as $cookie) {
            Peregrine\Http\header('Set-Cookie: ' . $cookie, false);
        }
        echo $response->getContent();

        $kernel->terminate($request, $response);
    } finally {
        $forgetRequest();
    }
});
