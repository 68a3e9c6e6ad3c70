<?php
header('Content-Type: text/plain');
echo 'start=' . var_export(headers_sent(), true) . "\n";
echo 'ob_level=' . ob_get_level() . "\n";
echo 'after_echo=' . var_export(headers_sent(), true) . "\n";
ob_flush();
flush();
echo 'after_flush=' . var_export(headers_sent($file, $line), true) . ' line=' . $line . "\n";
header('X-Too-Late: yes');
echo 'late_header_listed=' . var_export(in_array('X-Too-Late: yes', headers_list(), true), true) . "\n";
echo 'last_error=' . (error_get_last()['message'] ?? '') . "\n";
