<?php
header('Content-Type: text/plain');
$keys = ['SCRIPT_FILENAME', 'SCRIPT_NAME', 'PHP_SELF', 'PATH_INFO', 'PATH_TRANSLATED', 'ORIG_PATH_INFO', 'DOCUMENT_ROOT', 'DOCUMENT_URI',
    'REQUEST_URI', 'QUERY_STRING', 'REQUEST_METHOD', 'REQUEST_SCHEME', 'SERVER_PROTOCOL', 'SERVER_NAME', 'SERVER_ADDR', 'SERVER_PORT',
    'REMOTE_ADDR', 'HTTPS', 'GATEWAY_INTERFACE', 'REDIRECT_STATUS', 'CONTENT_TYPE', 'CONTENT_LENGTH', 'HTTP_HOST', 'HTTP_X_CLIENT',
    'AUTH_TYPE', 'PHP_AUTH_USER', 'PHP_AUTH_PW', 'REMOTE_USER'];
foreach ($keys as $k) {
    echo "$k=" . var_export($_SERVER[$k] ?? '(unset)', true) . "\n";
}
echo 'REQUEST_TIME is int=' . var_export(is_int($_SERVER['REQUEST_TIME']), true) . "\n";
echo 'REQUEST_TIME_FLOAT is float=' . var_export(is_float($_SERVER['REQUEST_TIME_FLOAT']), true) . "\n";
echo 'REMOTE_PORT is digits=' . var_export(ctype_digit((string) $_SERVER['REMOTE_PORT']), true) . "\n";
echo 'SERVER_SOFTWARE set=' . var_export(($_SERVER['SERVER_SOFTWARE'] ?? '') !== '', true) . "\n";
echo 'argv=' . var_export($_SERVER['argv'] ?? '(unset)', true) . "\n";
echo 'sapi=' . PHP_SAPI . "\n";
// The request's own variables: $_SERVER without the process environment.
$own = array_filter(array_keys($_SERVER), fn ($k) => getenv($k, true) === false);
sort($own);
echo 'keys=' . implode(' ', $own) . "\n";
