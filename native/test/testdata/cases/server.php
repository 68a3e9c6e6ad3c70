<?php
$keys = ['REQUEST_METHOD', 'REQUEST_URI', 'QUERY_STRING', 'SERVER_PROTOCOL', 'REMOTE_ADDR', 'REMOTE_PORT',
    'SERVER_ADDR', 'SERVER_PORT', 'HTTPS', 'CONTENT_TYPE', 'CONTENT_LENGTH', 'HTTP_HOST', 'HTTP_X_MULTI',
    'HTTP_PROXY', 'GATEWAY_INTERFACE', 'SERVER_SOFTWARE', 'SCRIPT_NAME', 'PATH_INFO', 'PHP_SELF',
    'DOCUMENT_ROOT', 'SERVER_NAME', 'PHP_AUTH_USER', 'PHP_AUTH_PW', 'REMOTE_USER', 'FCGI_ROLE'];
$server = [];
foreach ($keys as $k) {
    $server[$k] = $_SERVER[$k] ?? null;
}
echo json_encode([
    'server' => $server,
    'time' => is_int($_SERVER['REQUEST_TIME']) && is_float($_SERVER['REQUEST_TIME_FLOAT']),
    'getenv' => getenv('REMOTE_ADDR'),
    'getenv_proxy' => getenv('HTTP_PROXY'),
    'getenv_all' => (getenv()['REQUEST_URI'] ?? null) === $_SERVER['REQUEST_URI'] && !isset(getenv()['PHP_SELF']),
    'headers' => getallheaders(),
    'apache' => apache_request_headers() === getallheaders(),
    'filter_get' => filter_input(INPUT_GET, 'q'),
    'filter_server' => filter_input(INPUT_SERVER, 'REMOTE_ADDR'),
    'cookie' => $_COOKIE,
]);
