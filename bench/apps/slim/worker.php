<?php
// Slim 3 under Peregrine: the app is built once per worker; each request goes through it as PSR-7
// messages. Slim 3's own Slim\Http classes read the superglobals, so the worker hands Slim
// Nyholm's PSR-7 objects (Slim 3's App::process() takes any PSR-7 request and response).
declare(strict_types=1);

require __DIR__ . '/../../../php/autoload.php';
require '/usr/share/php/Nyholm/Psr7/autoload.php';

use Psr\Http\Message\ResponseInterface;
use Psr\Http\Message\ServerRequestInterface;

$app = require __DIR__ . '/app.php';
$factory = new Nyholm\Psr7\Factory\Psr17Factory();

Peregrine\Worker::create()->servePsr(static function (ServerRequestInterface $request) use ($app, $factory): ResponseInterface {
    return $app->process($request, $factory->createResponse());
}, $factory);
