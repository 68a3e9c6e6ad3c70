<?php

declare(strict_types=1);

namespace Peregrine\Laravel;

use Illuminate\Queue\Connectors\ConnectorInterface;

/** QueueConnector makes the `peregrine` driver's connections (config/queue.php). */
final class QueueConnector implements ConnectorInterface
{
    /** @param array<string, mixed> $config */
    public function connect(array $config): Queue
    {
        return new Queue((string) ($config['queue'] ?? 'default'));
    }
}
