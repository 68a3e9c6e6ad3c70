<?php
// Hello world, Peregrine PSR-7 mode with Nyholm's PSR-17 factory (php-nyholm-psr7).
declare(strict_types=1);

require __DIR__ . '/../../../php/autoload.php';
require '/usr/share/php/Nyholm/Psr7/autoload.php';

use Psr\Http\Message\ResponseInterface;
use Psr\Http\Message\ServerRequestInterface;

$factory = new Nyholm\Psr7\Factory\Psr17Factory();

Peregrine\Worker::create()->servePsr(static function (ServerRequestInterface $request) use ($factory): ResponseInterface {
    return $factory->createResponse(200)
        ->withHeader('Content-Type', 'text/plain')
        ->withBody($factory->createStream('Hello, world!'));
}, $factory);
