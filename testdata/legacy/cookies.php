<?php
setcookie('plain', 'value');
setcookie('full', 'a b&c', [
    'expires' => 2000000000,
    'path' => '/sub/',
    'domain' => 'example.test',
    'secure' => true,
    'httponly' => true,
    'samesite' => 'Strict',
]);
setcookie('old_style', 'x', 2000000000, '/', '', false, true);
setrawcookie('raw', 'a%20b+c');
setcookie('gone', '', time() - 3600);
setcookie('gone2', '');
echo 'cookies sent; received: ' . json_encode($_COOKIE);
