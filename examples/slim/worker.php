<?php
// A Slim 3 application (Debian's php-slim) in worker mode: the app and its routes are built
// once per worker; every request reaches it as a fresh PSR-7 request through servePsr().
//
//     peregrine serve examples/slim/worker.php
declare(strict_types=1);

require __DIR__ . '/../../php/autoload.php';
require_once '/usr/share/php/Slim/autoload.php';
require_once '/usr/share/php/Nyholm/Psr7/autoload.php';

use Nyholm\Psr7\Factory\Psr17Factory;
use Psr\Http\Message\ResponseInterface as Response;
use Psr\Http\Message\ServerRequestInterface as Request;

$app = new Slim\App(['settings' => ['displayErrorDetails' => getenv('APP_DEBUG') === '1']]);
$booted = date(DATE_ATOM);
$served = 0;

$app->get('/', function (Request $request, Response $response) use ($booted, &$served): Response {
    $response->getBody()->write(sprintf("Slim %s on Peregrine: this worker booted at %s and has served %d requests.\n",
        Slim\App::VERSION, $booted, ++$served));

    return $response->withHeader('Content-Type', 'text/plain');
});

$app->get('/hello/{name}', function (Request $request, Response $response, array $args): Response {
    $response->getBody()->write('Hello, ' . $args['name'] . '!');

    return $response->withHeader('Content-Type', 'text/plain');
});

// A JSON API: the body arrives as the PSR-7 request's stream.
$app->post('/api/echo', function (Request $request, Response $response): Response {
    $data = json_decode((string) $request->getBody(), true);
    $status = \is_array($data) ? 201 : 422;
    $response->getBody()->write(json_encode(\is_array($data) ? ['received' => $data] : ['error' => 'want a JSON object']));

    return $response->withStatus($status)->withHeader('Content-Type', 'application/json');
});

$factory = new Psr17Factory();
Peregrine\Worker::create()->servePsr(
    static fn (Request $request): Response => $app->process($request, $factory->createResponse()),
    $factory,
);
