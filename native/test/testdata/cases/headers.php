<?php
header('X-A: 1');
header('X-B: 1');
header('X-B: 2', false);
header_remove('X-A');
setcookie('c', 'v w');
setrawcookie('raw', 'x');
http_response_code(202);
echo json_encode(['list' => headers_list(), 'sent' => headers_sent(), 'code' => http_response_code()]);
