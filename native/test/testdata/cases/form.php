<?php
echo json_encode(['post' => $_POST, 'get' => $_GET, 'request' => $_REQUEST, 'count' => count($_POST)]);
