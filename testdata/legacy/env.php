<?php
header('Content-Type: text/plain');
foreach (['REMOTE_ADDR', 'REQUEST_METHOD', 'SCRIPT_NAME', 'QUERY_STRING', 'HTTP_USER_AGENT', 'HTTP_X_CLIENT', 'SERVER_PROTOCOL', 'NO_SUCH_VAR'] as $k) {
    echo "$k=" . var_export(getenv($k), true) . "\n";
}
echo 'local_only=' . var_export(getenv('REMOTE_ADDR', true), true) . "\n";
// Without a name: the environment and, under FPM, the request's variables.
$all = array_keys(array_filter(getenv(), fn ($v, $k) => getenv($k, true) === false, ARRAY_FILTER_USE_BOTH));
sort($all);
echo 'all=' . implode(' ', $all) . "\n";
