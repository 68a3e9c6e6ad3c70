<?php
// Notices and warnings go to the log, not the page (display_errors=Off in production).
header('Content-Type: text/plain');
echo $undefined_variable;
$a = [];
echo $a['missing'];
trigger_error('a user warning', E_USER_WARNING);
echo 'display_errors=' . var_export(ini_get('display_errors'), true) . ' log_errors=' . ini_get('log_errors') . "\n";
echo 'last=' . error_get_last()['message'] . "\n";
