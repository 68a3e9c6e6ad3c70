<?php
header('Content-Type: text/plain');
echo 'method=' . $_SERVER['REQUEST_METHOD'] . "\n";
echo 'GET=' . json_encode($_GET) . "\n";
echo 'POST=' . json_encode($_POST) . "\n";
echo 'REQUEST=' . json_encode($_REQUEST) . "\n";
echo 'COOKIE=' . json_encode($_COOKIE) . "\n";
echo 'input_length=' . strlen(file_get_contents('php://input')) . "\n";
echo 'CONTENT_TYPE=' . var_export($_SERVER['CONTENT_TYPE'] ?? null, true) . "\n";
echo 'CONTENT_LENGTH=' . var_export($_SERVER['CONTENT_LENGTH'] ?? null, true) . "\n";
