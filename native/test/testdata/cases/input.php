<?php
// php://input twice: PHP keeps the body for a second read.
echo json_encode([$_SERVER['REQUEST_METHOD'], file_get_contents('php://input'), file_get_contents('php://input'), $_POST]);
