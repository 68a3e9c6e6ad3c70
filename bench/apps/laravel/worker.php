<?php
// Laravel under Peregrine: the application and its HTTP kernel boot once per worker; each request
// is handed to the kernel through the superglobals (serveGlobals), the way public/index.php gets it
// under PHP-FPM, and the kernel's response is turned into the status, headers and body.
declare(strict_types=1);

require __DIR__ . '/../../../php/autoload.php';

use Illuminate\Contracts\Http\Kernel;
use Illuminate\Http\Request;

$app = require __DIR__ . '/bootstrap/app.php';
$kernel = $app->make(Kernel::class);
$kernel->bootstrap();

Peregrine\Worker::create()->serveGlobals(static function () use ($kernel): void {
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
});
