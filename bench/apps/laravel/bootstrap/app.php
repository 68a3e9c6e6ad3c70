<?php
// Creates the application, as in the Laravel 8 skeleton. The framework comes from Debian's
// php-laravel-framework (/usr/share/php/Illuminate); the app's own classes load from app/.
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

$app = new App\Application(dirname(__DIR__));

$app->singleton(Illuminate\Contracts\Http\Kernel::class, App\Http\Kernel::class);
$app->singleton(Illuminate\Contracts\Debug\ExceptionHandler::class, App\Exceptions\Handler::class);

return $app;
