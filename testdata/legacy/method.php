<?php
header('Content-Type: text/plain');
header('Allow: GET, POST, PUT, DELETE, OPTIONS');
if ($_SERVER['REQUEST_METHOD'] === 'OPTIONS') {
    http_response_code(204);
    exit;
}
echo $_SERVER['REQUEST_METHOD'] . ' ' . strlen(file_get_contents('php://input')) . ' ' . json_encode($_POST);
