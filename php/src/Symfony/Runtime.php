<?php

declare(strict_types=1);

namespace Peregrine\Symfony;

use Symfony\Component\HttpKernel\HttpKernelInterface;
use Symfony\Component\Runtime\RunnerInterface;
use Symfony\Component\Runtime\SymfonyRuntime;

/**
 * Runtime is the symfony/runtime runtime of `peregrine serve --symfony APP_DIR`: the
 * application's own public/index.php returns its kernel as under PHP-FPM, and this runtime
 * hands an HTTP kernel to a Runner that serves request after request in the same process
 * instead of one. Everything else (console commands, closures returning a Response, options,
 * .env loading) is SymfonyRuntime's.
 *
 * php/bin/symfony-worker.php selects it through APP_RUNTIME; an app may also name it in its
 * composer.json ("extra": {"runtime": {"class": "Peregrine\\Symfony\\Runtime"}}).
 */
final class Runtime extends SymfonyRuntime
{
    public function getRunner(?object $application): RunnerInterface
    {
        if ($application instanceof HttpKernelInterface && \function_exists('peregrine_handle_request')) {
            // The front file this worker runs, as symfony-worker.php names it.
            return new Runner($application, \dirname((string) ($_SERVER['SCRIPT_FILENAME'] ?? getcwd() . '/public/index.php')));
        }

        return parent::getRunner($application);
    }
}
