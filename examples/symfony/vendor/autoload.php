<?php
// What Composer's vendor/autoload.php would be: the Symfony components from Debian's packages
// (php-symfony-framework-bundle, -security-bundle, -runtime, -dotenv) and the app's App\ classes.

require_once '/usr/share/php/Symfony/Bundle/FrameworkBundle/autoload.php';
require_once '/usr/share/php/Symfony/Bundle/SecurityBundle/autoload.php';
require_once '/usr/share/php/Symfony/Component/Runtime/autoload.php';
require_once '/usr/share/php/Symfony/Component/Dotenv/autoload.php';

spl_autoload_register(static function (string $class): void {
    if (strncmp($class, 'App\\', 4) === 0) {
        $file = __DIR__ . '/../src/' . strtr(substr($class, 4), '\\', '/') . '.php';
        if (is_file($file)) {
            require $file;
        }
    }
});
