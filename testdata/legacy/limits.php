<?php
// What a page sees once PHP's input limits have cut the request.
header('Content-Type: text/plain');
foreach (['upload_max_filesize', 'post_max_size', 'max_file_uploads', 'max_input_vars'] as $k) {
    echo "$k=" . ini_get($k) . "\n";
}
echo 'CONTENT_LENGTH=' . $_SERVER['CONTENT_LENGTH'] . "\n";
echo 'post_vars=' . count($_POST) . "\n";
echo 'get_vars=' . count($_GET) . "\n";
echo 'files=' . json_encode(array_map(fn ($f) => ['error' => $f['error'], 'size' => $f['size']], $_FILES)) . "\n";
echo 'input_length=' . strlen(file_get_contents('php://input')) . "\n";
echo 'error_last=' . (error_get_last()['message'] ?? '') . "\n";
