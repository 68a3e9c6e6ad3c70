<?php
header('Content-Type: text/plain');
echo 'before=' . ini_get('precision') . ' ' . ini_get('date.timezone') . ' ' . ini_get('memory_limit') . "\n";
ini_set('precision', '4');
ini_set('memory_limit', '64M');
date_default_timezone_set('Asia/Tokyo');
echo 'after=' . ini_get('precision') . ' ' . 1 / 3 . ' ' . ini_get('memory_limit') . ' ' . date_default_timezone_get() . "\n";
echo 'ini_set_returns=' . var_export(ini_set('display_errors', '0'), true) . "\n";
