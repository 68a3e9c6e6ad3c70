<?php

declare(strict_types=1);

// Loads the Peregrine library without Composer: require this file from the worker script.

spl_autoload_register(static function (string $class): void {
    if (strncmp($class, 'Peregrine\\', 10) !== 0) {
        return;
    }
    $file = __DIR__ . '/src/' . strtr(substr($class, 10), '\\', '/') . '.php';
    if (is_file($file)) {
        require $file;
    }
});

require_once __DIR__ . '/src/Http/functions.php';
require_once __DIR__ . '/src/Async/functions.php';
