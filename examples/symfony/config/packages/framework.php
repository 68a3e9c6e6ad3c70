<?php

use Symfony\Component\DependencyInjection\Loader\Configurator\ContainerConfigurator;

return static function (ContainerConfigurator $container): void {
    $container->extension('framework', [
        'secret' => '%env(APP_SECRET)%',
        'http_method_override' => false,
        // PHP's own sessions (files in session.save_path), as the Symfony skeleton has them.
        'session' => [
            'handler_id' => null,
            'storage_factory_id' => 'session.storage.factory.native',
            'cookie_secure' => 'auto',
            'cookie_samesite' => 'lax',
        ],
        'router' => ['utf8' => true],
        'php_errors' => ['log' => true],
    ]);
};
