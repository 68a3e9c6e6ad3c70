<?php

use Symfony\Component\DependencyInjection\Loader\Configurator\ContainerConfigurator;
use Symfony\Component\Security\Core\User\InMemoryUser;

// The security component with a form login against users kept in memory.
return static function (ContainerConfigurator $container): void {
    $container->extension('security', [
        'enable_authenticator_manager' => true,
        'password_hashers' => [InMemoryUser::class => 'plaintext'],
        'providers' => [
            'users' => ['memory' => ['users' => [
                'alice' => ['password' => 'secret', 'roles' => ['ROLE_USER']],
                'bob' => ['password' => 'secret', 'roles' => ['ROLE_USER']],
                'carol' => ['password' => 'secret', 'roles' => ['ROLE_USER']],
            ]]],
        ],
        'firewalls' => [
            'main' => [
                'lazy' => true,
                'provider' => 'users',
                'form_login' => ['login_path' => 'login', 'check_path' => 'login', 'default_target_path' => '/account'],
                'logout' => ['path' => 'logout', 'target' => '/'],
            ],
        ],
        'access_control' => [
            ['path' => '^/account', 'roles' => 'ROLE_USER'],
        ],
    ]);
};
