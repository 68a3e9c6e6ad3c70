<?php
header('Content-Type: text/plain');
$h = getallheaders();
ksort($h);
foreach ($h as $name => $value) {
    if ($name === 'Host') {
        $value = 'HOST';
    }
    echo "$name: $value\n";
}
echo 'same_as_apache=' . var_export(apache_request_headers() == getallheaders(), true) . "\n";
