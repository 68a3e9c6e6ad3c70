<?php
header('Content-Type: application/json');
echo json_encode(['script' => $_SERVER['SCRIPT_NAME'], 'path_info' => $_SERVER['PATH_INFO'] ?? null, 'self' => $_SERVER['PHP_SELF']]);
