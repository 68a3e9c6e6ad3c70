<?php
echo 'before';
ini_set('memory_limit', '8M');
$s = str_repeat('x', 16 << 20);
echo 'after';
