<?php
header('Content-Type: application/json');
$id = filter_input(INPUT_GET, 'id', FILTER_VALIDATE_INT);
if ($_SERVER['REQUEST_METHOD'] === 'DELETE') {
    http_response_code(204);
    exit;
}
if ($id === null || $id === false) {
    http_response_code(404);
    echo json_encode(['error' => 'no such item']);
    exit;
}
echo json_encode(['id' => $id, 'path' => $_SERVER['PATH_INFO'] ?? '', 'self' => $_SERVER['PHP_SELF']]);
