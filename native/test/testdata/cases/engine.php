<?php
// For TestEngine: the executable PHP runs in, and whether the runtime's preload reaches PHP's
// environment or the programs PHP runs.
echo json_encode(['exe' => readlink('/proc/self/exe'), 'preload' => getenv('LD_PRELOAD'),
    'child' => trim((string) shell_exec('printenv LD_PRELOAD; echo end'))]);
