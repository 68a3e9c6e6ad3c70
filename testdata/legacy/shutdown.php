<?php
register_shutdown_function(function () {
    echo "shutdown 1\n";
});
register_shutdown_function(function ($arg) {
    echo "shutdown 2 $arg\n";
}, 'with arg');
header('Content-Type: text/plain');
echo "main\n";
exit("exited\n");
