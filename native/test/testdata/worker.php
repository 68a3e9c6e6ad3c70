<?php
// A worker-mode fixture: each request runs the case script named by SCRIPT_FILENAME, so the same
// cases run in classic and in worker mode. State kept on purpose survives between requests.
echo "worker booting: ", json_encode([$argc, $argv[1] ?? null, PHP_SAPI]), "\n";
$served = 0;
while (peregrine_handle_request(function () use (&$served): void {
    $served++;
    switch ($_SERVER['PATH_INFO'] ?? '') {
        case '/served':
            echo $served;
            return;
        case '/memory':
            gc_collect_cycles();
            echo memory_get_usage();
            return;
    }
    require $_SERVER['SCRIPT_FILENAME'];
})) {
}
echo "worker stopping\n";
