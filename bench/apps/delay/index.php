<?php
// A handler that waits 50 ms (a database or an API call), for nginx + PHP-FPM.
usleep(50000);
header('Content-Type: text/plain');
echo 'Hello, world!';
