<?php

use App\Probe\ProbeController;
use Symfony\Component\Routing\Loader\Configurator\RoutingConfigurator;

return static function (RoutingConfigurator $routes): void {
    $routes->add('probe_memo_set', '/probe/memo/set')->controller([ProbeController::class, 'memoSet']);
    $routes->add('probe_memo_get', '/probe/memo/get')->controller([ProbeController::class, 'memoGet']);
    $routes->add('probe_token_set', '/probe/token/set')->controller([ProbeController::class, 'tokenSet']);
    $routes->add('probe_token_get', '/probe/token/get')->controller([ProbeController::class, 'tokenGet']);
    $routes->add('probe_exit', '/probe/exit')->controller([ProbeController::class, 'exit']);
    $routes->add('probe_static_set', '/probe/static/set')->controller([ProbeController::class, 'staticSet']);
    $routes->add('probe_mark', '/probe/mark')->controller([ProbeController::class, 'mark']);
    $routes->add('probe_after', '/probe/after')->controller([ProbeController::class, 'after']);
};
