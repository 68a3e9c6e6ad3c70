<?php
header('Content-Type: text/plain');
echo 'before ';
if (($_GET['how'] ?? '') === 'status') {
    http_response_code(403);
    die('forbidden');
}
exit(3);
