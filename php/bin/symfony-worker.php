<?php
// The worker `peregrine serve --symfony APP_DIR` runs on the native runtime: it runs the app's
// own public/index.php through symfony/runtime with Peregrine\Symfony\Runtime, whose runner
// serves every request with the one kernel (php/src/Symfony, docs/frameworks.md).
declare(strict_types=1);

require __DIR__ . '/../autoload.php';

$dir = (string) realpath((string) ($argv[1] ?? getcwd()));
$front = $dir . '/public/index.php';
if (!is_file($front)) {
    fwrite(fopen('php://stderr', 'w'), "{$front} not found: --symfony wants the directory of a Symfony application\n");
    exit(1);
}
if (!is_file('/usr/share/php/Symfony/Component/Runtime/autoload.php') && !is_file($dir . '/vendor/symfony/runtime/SymfonyRuntime.php')) {
    fwrite(fopen('php://stderr', 'w'), "symfony/runtime is missing: apt-get install php-symfony-runtime, or composer require symfony/runtime\n");
    exit(1);
}
// What autoload_runtime.php reads: the front file to run, the runtime to run it with.
$_SERVER['APP_RUNTIME'] = Peregrine\Symfony\Runtime::class;
$_SERVER['SCRIPT_FILENAME'] = $front;
unset($_SERVER['argv'], $_SERVER['argc']);
require $front;
