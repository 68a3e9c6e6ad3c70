<?php
// The 20 KB page (page.php) for nginx + PHP-FPM; nginx compresses it (gzip on).
require __DIR__ . '/page.php';
header('Content-Type: text/html; charset=UTF-8');
echo front_page();
