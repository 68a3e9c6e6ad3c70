<?php
// Creates the application, as the Laravel 8 skeleton's bootstrap/app.php does. The framework
// comes from Debian's php-laravel-framework (/usr/share/php/Illuminate) instead of Composer's
// vendor/; the app's own classes load from app/.
declare(strict_types=1);

require_once '/usr/share/php/Illuminate/autoload.php';

spl_autoload_register(static function (string $class): void {
    if (strncmp($class, 'App\\', 4) === 0) {
        $file = __DIR__ . '/../app/' . strtr(substr($class, 4), '\\', '/') . '.php';
        if (is_file($file)) {
            require $file;
        }
    }
});

$app = new Illuminate\Foundation\Application(dirname(__DIR__));

// Writable paths; STORAGE_DIR lets tests and read-only deploys put them elsewhere.
$storage = getenv('STORAGE_DIR') ?: dirname(__DIR__) . '/storage';
foreach (['/framework/views', '/framework/sessions', '/framework/cache', '/logs', '/app/uploads'] as $sub) {
    if (!is_dir($storage . $sub)) {
        mkdir($storage . $sub, 0777, true);
    }
}
$app->useStoragePath($storage);

$app->singleton(Illuminate\Contracts\Http\Kernel::class, App\Http\Kernel::class);
$app->singleton(Illuminate\Contracts\Debug\ExceptionHandler::class, App\Exceptions\Handler::class);

return $app;
