<?php
// ?code=N: http_response_code(N); ?line=...: a status line of its own; ?status=...: a CGI Status header.
echo 'default=' . var_export(http_response_code(), true) . "\n";
if (isset($_GET['code'])) {
    echo 'previous=' . var_export(http_response_code((int) $_GET['code']), true) . "\n";
}
if (isset($_GET['line'])) {
    header($_GET['line']);
}
if (isset($_GET['status'])) {
    header('Status: ' . $_GET['status']);
}
echo 'now=' . var_export(http_response_code(), true) . "\n";
