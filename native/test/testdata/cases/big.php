<?php
$chunk = str_repeat('x', 1000);
for ($i = 0; $i < 3000; $i++) {
    echo $chunk;
}
