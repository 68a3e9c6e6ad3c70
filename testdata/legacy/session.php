<?php
session_start();
if (isset($_GET['login'])) {
    $_SESSION['user'] = $_GET['login'];
    $_SESSION['visits'] = 0;
}
$_SESSION['visits'] = ($_SESSION['visits'] ?? 0) + 1;
header('Content-Type: text/plain');
echo 'user=' . ($_SESSION['user'] ?? 'anonymous') . "\n";
echo 'visits=' . $_SESSION['visits'] . "\n";
echo 'name=' . session_name() . "\n";
echo 'status=' . session_status() . "\n";
echo 'id_from_cookie=' . var_export(isset($_COOKIE[session_name()]) && $_COOKIE[session_name()] === session_id(), true) . "\n";
