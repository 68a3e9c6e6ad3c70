<?php
// The Symfony skeleton's front controller, unchanged: symfony/runtime runs the closure. Under
// nginx + PHP-FPM once per request; under `peregrine serve --symfony .` once per worker, whose
// runner then serves request after request with the kernel it returns.

use App\Kernel;

require_once dirname(__DIR__) . '/vendor/autoload_runtime.php';

return function (array $context) {
    return new Kernel($context['APP_ENV'], (bool) $context['APP_DEBUG']);
};
