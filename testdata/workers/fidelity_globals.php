<?php
// FPM-style code for the PHP-FPM fidelity tests (integration/fpm_fidelity_test.go): ?code=N sets
// the status with http_response_code(); the body is the worker's pid.
declare(strict_types=1);

require __DIR__ . '/../../php/autoload.php';

Peregrine\Worker::create()->serveGlobals(function (): void {
    if (isset($_GET['code'])) {
        http_response_code((int) $_GET['code']);
    }
    echo getmypid();
});
