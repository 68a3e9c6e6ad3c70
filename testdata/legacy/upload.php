<?php
// The upload form's handler: every file checked and moved, as the manual shows.
header('Content-Type: text/plain');
// Where PHP writes uploads: upload_tmp_dir, or the system's temporary directory without it.
$dir = ini_get('upload_tmp_dir') ?: sys_get_temp_dir();
echo 'POST=' . json_encode($_POST) . "\n";
echo 'files=' . count($_FILES) . "\n";
foreach ($_FILES as $field => $f) {
    $names = (array) $f['name'];
    foreach (array_keys($names) as $i) {
        $tmp = is_array($f['tmp_name']) ? $f['tmp_name'][$i] : $f['tmp_name'];
        $error = is_array($f['error']) ? $f['error'][$i] : $f['error'];
        $size = is_array($f['size']) ? $f['size'][$i] : $f['size'];
        $type = is_array($f['type']) ? $f['type'][$i] : $f['type'];
        $name = is_array($f['name']) ? $f['name'][$i] : $f['name'];
        echo "$field/$i: name=$name type=$type size=$size error=$error";
        // The temporary name is random; where it is is not.
        echo ' tmp_in_tmp_dir=' . var_export($tmp !== '' && dirname($tmp) === $dir && str_starts_with(basename($tmp), 'php'), true);
        $uploaded = $tmp !== '' && is_uploaded_file($tmp);
        echo ' is_uploaded_file=' . var_export($uploaded, true);
        if ($uploaded) {
            $dest = $dir . '/legacy-upload-' . bin2hex(random_bytes(6));
            $moved = move_uploaded_file($tmp, $dest);
            echo ' moved=' . var_export($moved, true) . ' sha1=' . sha1_file($dest);
            echo ' moved_again=' . var_export(@move_uploaded_file($tmp, $dest . '-2'), true);
            unlink($dest);
        }
        echo "\n";
    }
}
echo 'not_uploaded=' . var_export(is_uploaded_file(__FILE__), true) . "\n";
echo 'error_last=' . (error_get_last()['message'] ?? '') . "\n";
