<?php
// A long page sent in parts, as reports and progress pages do.
header('Content-Type: text/plain');
header('X-Accel-Buffering: no');
for ($i = 1; $i <= 5; $i++) {
    echo "part $i " . str_repeat('.', 2000) . "\n";
    if (ob_get_level() > 0) {
        ob_flush();
    }
    flush();
}
echo 'done';
