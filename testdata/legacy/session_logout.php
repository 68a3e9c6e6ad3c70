<?php
session_start();
$user = $_SESSION['user'] ?? 'anonymous';
$_SESSION = [];
$p = session_get_cookie_params();
setcookie(session_name(), '', time() - 42000, $p['path'], $p['domain'], $p['secure'], $p['httponly']);
session_destroy();
echo 'bye ' . $user;
