<?php
session_start();
if (isset($_GET['user'])) {
    $_SESSION['user'] = $_GET['user'];
}
echo json_encode(['id' => session_id(), 'session' => $_SESSION]);
