<?php
// Moves the file "keep" into DEST (a query parameter); reports every upload.
$out = [];
foreach ($_FILES as $field => $f) {
    $out[$field] = ['name' => $f['name'], 'size' => $f['size'], 'error' => $f['error'], 'tmp' => $f['tmp_name'],
        'uploaded' => is_uploaded_file($f['tmp_name'])];
    if ($field === 'keep') {
        $out[$field]['moved'] = move_uploaded_file($f['tmp_name'], $_GET['dest']);
    }
}
echo json_encode(['files' => $out, 'post' => $_POST, 'forged' => is_uploaded_file(__FILE__)]);
