<?php
// The CLI's stream constants: defined in worker mode (STDERR and STDOUT write to the log),
// undefined in classic mode, as under FPM.
$defined = [defined('STDIN'), defined('STDOUT'), defined('STDERR')];
$written = defined('STDERR') ? fwrite(STDERR, "stdio case: to the log\n") : false;
if (defined('STDOUT')) {
    fwrite(STDOUT, "stdio case: stdout to the log\n");
}
echo json_encode(['defined' => $defined, 'written' => $written]);
