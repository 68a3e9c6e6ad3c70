<?php
// TechEmpower's test types in classic style, for PHP-FPM (every request to this file): a
// persistent PDO connection per FPM child. tfb.php has the code.
declare(strict_types=1);

require __DIR__ . '/tfb.php';

$path = parse_url($_SERVER['REQUEST_URI'] ?? '/', PHP_URL_PATH);
[$status, $headers, $body] = tfb_handle(static fn (): PDO => tfb_pdo(true), is_string($path) ? $path : '/', $_GET);
http_response_code($status);
foreach ($headers as $name => $value) {
    header("$name: $value");
}
header('Content-Length: ' . strlen($body));
echo $body;
