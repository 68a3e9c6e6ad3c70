<?php
// Prints, one per line, the library files under /usr/share/php that one GET / of an app loads:
// the list its opcache.preload script requires. Usage: php preload-list.php APP/public/index.php [PATH]
// (PATH: the route to request, / by default).
declare(strict_types=1);

$entry = realpath($argv[1] ?? '') ?: exit("usage: php preload-list.php ENTRY.php [PATH]\n");
$_SERVER = array_merge($_SERVER, [
    'REQUEST_METHOD' => 'GET', 'REQUEST_URI' => $argv[2] ?? '/', 'SCRIPT_NAME' => '/index.php', 'SCRIPT_FILENAME' => $entry,
    'SERVER_NAME' => 'localhost', 'SERVER_PORT' => '80', 'SERVER_PROTOCOL' => 'HTTP/1.1', 'HTTP_HOST' => 'localhost',
    'REMOTE_ADDR' => '127.0.0.1',
]);
chdir(dirname($entry));
register_shutdown_function(static function (): void {
    while (ob_get_level() > 0) {
        ob_end_clean();
    }
    foreach (get_included_files() as $file) {
        if (str_starts_with($file, '/usr/share/php/')) {
            fwrite(STDOUT, $file . "\n");
        }
    }
});
ob_start();
require $entry;
