<?php
// Location with a status already set keeps that status (201), not 302.
http_response_code(201);
header('Location: /api/items.php?id=7');
header('Content-Type: application/json');
echo json_encode(['id' => 7]);
