<?php

declare(strict_types=1);

require __DIR__ . '/../autoload.php';

// PSR-7/17 and Nyholm from Debian's php-nyholm-psr7, or a Composer install.
foreach ([__DIR__ . '/../vendor/autoload.php', '/usr/share/php/Nyholm/Psr7/autoload.php'] as $file) {
    if (is_file($file)) {
        require_once $file;
        break;
    }
}

spl_autoload_register(static function (string $class): void {
    if (strncmp($class, 'Peregrine\\Tests\\', 16) === 0) {
        $file = __DIR__ . '/' . strtr(substr($class, 16), '\\', '/') . '.php';
        if (is_file($file)) {
            require $file;
        }
    }
});
