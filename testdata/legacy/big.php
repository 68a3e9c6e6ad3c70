<?php
// A page larger than the output buffer.
header('Content-Type: text/html; charset=UTF-8');
echo "<!doctype html><title>big</title><ul>\n";
for ($i = 0; $i < 3000; $i++) {
    echo "<li>row $i</li>\n";
}
echo '</ul>';
