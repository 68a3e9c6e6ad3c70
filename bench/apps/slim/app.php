<?php
// The Slim 3 app (php-slim from Debian): one route. Required by public/index.php (PHP-FPM, once
// per request) and by worker.php (Peregrine, once per worker).
declare(strict_types=1);

require_once '/usr/share/php/Slim/autoload.php';

use Psr\Http\Message\ResponseInterface;
use Psr\Http\Message\ServerRequestInterface;

$app = new Slim\App(['settings' => ['displayErrorDetails' => false]]);

$app->get('/', function (ServerRequestInterface $request, ResponseInterface $response): ResponseInterface {
    $response->getBody()->write('Hello, world!');

    return $response->withHeader('Content-Type', 'text/plain');
});

return $app;
