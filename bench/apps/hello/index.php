<?php
// Hello world for nginx + PHP-FPM and for `php -S` (as the router script).
header('Content-Type: text/plain');
echo 'Hello, world!';
