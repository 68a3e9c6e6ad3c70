<?php
header('Content-Type: text/plain');
foreach (['SCRIPT_NAME', 'PHP_SELF', 'PATH_INFO', 'DOCUMENT_URI', 'REQUEST_URI', 'SCRIPT_FILENAME'] as $k) {
    echo "$k=" . var_export($_SERVER[$k] ?? '(unset)', true) . "\n";
}
