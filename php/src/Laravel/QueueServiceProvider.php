<?php

declare(strict_types=1);

namespace Peregrine\Laravel;

use Illuminate\Queue\QueueManager;
use Illuminate\Support\ServiceProvider;

/**
 * QueueServiceProvider registers the `peregrine` queue driver. Add it to config/app.php's
 * providers and a connection to config/queue.php:
 *
 *     'peregrine' => ['driver' => 'peregrine', 'queue' => 'default'],   // queue = pipeline name
 */
final class QueueServiceProvider extends ServiceProvider
{
    public function register(): void
    {
        $this->app->afterResolving('queue', static function (QueueManager $manager): void {
            $manager->addConnector('peregrine', static fn (): QueueConnector => new QueueConnector());
        });
    }
}
