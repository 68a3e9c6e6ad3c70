<?php
$status = function_exists('opcache_get_status') ? opcache_get_status(false) : false;
echo json_encode(['sapi' => PHP_SAPI, 'name' => php_sapi_name(), 'opcache' => is_array($status) && $status['opcache_enabled'],
    'session' => isset($_SESSION) ? $_SESSION : null]);
