<?php
header('Content-Type: text/plain');
echo 'level=' . ob_get_level() . ' size=' . ini_get('output_buffering') . "\n";
ob_start();
echo 'captured';
$captured = ob_get_clean();
ob_start(function ($buffer) {
    return strtoupper($buffer);
});
echo "upper case\n";
ob_end_flush();
ob_start();
echo 'discarded';
ob_end_clean();
ob_start();
echo 'nested ';
ob_start();
echo 'inner';
$inner = ob_get_contents();
ob_end_flush();
echo ' level=' . ob_get_level();
ob_end_flush();
echo "\ncaptured=$captured inner=$inner\n";
ob_start();
echo 'left open at the end';
