<?php
// A JSON API: the body from php://input, read twice.
header('Content-Type: application/json; charset=utf-8');
$raw = file_get_contents('php://input');
$again = file_get_contents('php://input');
$data = json_decode($raw, true);
if (!is_array($data)) {
    http_response_code(400);
    echo json_encode(['error' => 'invalid JSON', 'length' => strlen($raw)]);
    exit;
}
if (($data['name'] ?? '') === '') {
    http_response_code(422);
    echo json_encode(['error' => 'name is required']);
    exit;
}
http_response_code($_SERVER['REQUEST_METHOD'] === 'POST' ? 201 : 200);
echo json_encode([
    'method' => $_SERVER['REQUEST_METHOD'],
    'content_type' => $_SERVER['CONTENT_TYPE'],
    'content_length' => $_SERVER['CONTENT_LENGTH'],
    'same_twice' => $raw === $again,
    'post' => $_POST,
    'data' => $data,
]);
