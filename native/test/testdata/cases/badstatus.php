<?php
// ?code=N: a status the answer cannot carry (http_response_code() takes any int).
header('X-Before: 1');
http_response_code((int) $_GET['code']);
echo 'not sent';
flush();
echo 'nor this';
