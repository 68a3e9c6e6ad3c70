<?php
// HTTP basic authentication, as PHP scripts did it.
if (!isset($_SERVER['PHP_AUTH_USER'])) {
    header('WWW-Authenticate: Basic realm="Legacy"');
    http_response_code(401);
    echo 'login required';
    exit;
}
echo 'user=' . $_SERVER['PHP_AUTH_USER'] . ' pw=' . $_SERVER['PHP_AUTH_PW'] . ' type=' . ($_SERVER['AUTH_TYPE'] ?? '');
