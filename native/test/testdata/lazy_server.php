<?php
// A worker whose own code never names the server superglobal, so the runtime registers it for
// a request only when something wants it (native/worker.c), as PHP-FPM's auto_globals_jit does.
// Each answer: the request's URI from getenv(), then what $GLOBALS holds under the name (read
// through a variable, which does not make PHP create it), then what /include and /filter get.
$name = '_SERVER';
while (peregrine_handle_request(static function () use ($name): void {
    $uri = getenv('REQUEST_URI');
    echo $uri, ' ', isset($GLOBALS[$name]) ? $GLOBALS[$name]['REQUEST_URI'] : 'unregistered';
    if ($uri === '/include') {
        echo ' ', require __DIR__ . '/lazy_include.php';
    } elseif ($uri === '/filter') {
        echo ' ', filter_input(INPUT_SERVER, 'REQUEST_URI');
    }
})) {
}
