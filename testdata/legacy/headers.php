<?php
header('Content-Type: text/plain; charset=iso-8859-1');
header('X-Frame-Options: DENY');
header('X-Multi: one');
header('X-Multi: two', false);
header('X-Replaced: first');
header('X-Replaced: second');
header('X-Removed: yes');
header_remove('X-Removed');
header('Cache-Control: private, max-age=60');
header('Link: </assets/site.css>; rel=preload; as=style');
echo "headers set:\n";
foreach (headers_list() as $h) {
    echo $h, "\n";
}
