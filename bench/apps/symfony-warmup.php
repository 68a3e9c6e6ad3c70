<?php
// What `bin/console cache:warmup --env=prod` does in a Symfony deploy, for examples/symfony
// (which has no bin/console): compiles the container and warms the caches (routes, annotations)
// under VAR_DIR, so neither server compiles them during a measured run.
declare(strict_types=1);

$dir = dirname(__DIR__, 2) . '/examples/symfony';
require $dir . '/vendor/autoload.php';

(new Symfony\Component\Dotenv\Dotenv())->bootEnv($dir . '/.env');
$kernel = new App\Kernel($_SERVER['APP_ENV'] ?? 'prod', (bool) ($_SERVER['APP_DEBUG'] ?? false));
(new Symfony\Component\Filesystem\Filesystem())->remove($kernel->getCacheDir());
$kernel->boot();
$container = $kernel->getContainer();
if ($container->has('cache_warmer')) {
    $container->get('cache_warmer')->warmUp($kernel->getCacheDir());
}
$response = $kernel->handle(Symfony\Component\HttpFoundation\Request::create('/hello'));
if ($response->getContent() !== 'Hello, world!') {
    fwrite(STDERR, "GET /hello answered {$response->getStatusCode()}: {$response->getContent()}\n");
    exit(1);
}
echo $kernel->getCacheDir(), PHP_EOL;
