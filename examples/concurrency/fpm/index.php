<?php
// nginx + PHP-FPM side of the concurrency benchmark: the same waits (../waits.php), one
// request per process; persistent MySQL and Redis connections, kept by each child.
declare(strict_types=1);

require __DIR__ . '/../waits.php';

[$mysql, $redis] = concurrency_pools(persistent: true);
$body = concurrency_wait((string) parse_url($_SERVER['REQUEST_URI'] ?? '/', PHP_URL_PATH), $mysql, $redis);
header('Content-Type: text/plain');
if ($body === null) {
    http_response_code(404);
    $body = 'no such wait';
}
echo $body;
