<?php
// What `php artisan config:cache` does in a Laravel deploy: writes the merged configuration to
// bootstrap/cache/config.php (under LARAVEL_RUNTIME_DIR), so each request loads one file.
declare(strict_types=1);

$app = require __DIR__ . '/bootstrap/app.php';
$path = $app->getCachedConfigPath();
@unlink($path);
$app->make(Illuminate\Contracts\Http\Kernel::class)->bootstrap();
file_put_contents($path, '<?php return ' . var_export($app['config']->all(), true) . ';' . PHP_EOL);
echo $path, PHP_EOL;
