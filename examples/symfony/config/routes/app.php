<?php

use App\Controller\AppController;
use Symfony\Component\Routing\Loader\Configurator\RoutingConfigurator;

return static function (RoutingConfigurator $routes): void {
    $routes->add('home', '/')->controller([AppController::class, 'home'])->methods(['GET']);
    $routes->add('login', '/login')->controller([AppController::class, 'login'])->methods(['GET', 'POST']);
    $routes->add('logout', '/logout')->methods(['GET']);
    $routes->add('account', '/account')->controller([AppController::class, 'account'])->methods(['GET']);
    $routes->add('whoami', '/whoami')->controller([AppController::class, 'whoami'])->methods(['GET']);
    $routes->add('api_echo', '/api/echo')->controller([AppController::class, 'apiEcho'])->methods(['POST']);
    $routes->add('stream', '/stream')->controller([AppController::class, 'streamed'])->methods(['GET']);
    $routes->add('download', '/download')->controller([AppController::class, 'download'])->methods(['GET']);
    $routes->add('hello', '/hello')->controller([AppController::class, 'hello'])->methods(['GET']);
};
