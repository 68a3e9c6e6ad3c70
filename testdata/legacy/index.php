<?php
// The front controller: nginx's try_files sends every path without a file here.
header('Content-Type: text/plain; charset=utf-8');
echo "front controller\n";
echo 'REQUEST_URI=' . $_SERVER['REQUEST_URI'] . "\n";
echo 'QUERY_STRING=' . $_SERVER['QUERY_STRING'] . "\n";
echo 'SCRIPT_NAME=' . $_SERVER['SCRIPT_NAME'] . "\n";
echo 'PHP_SELF=' . $_SERVER['PHP_SELF'] . "\n";
echo 'PATH_INFO=' . var_export($_SERVER['PATH_INFO'] ?? null, true) . "\n";
echo 'DOCUMENT_URI=' . ($_SERVER['DOCUMENT_URI'] ?? '') . "\n";
echo 'GET=' . json_encode($_GET) . "\n";
