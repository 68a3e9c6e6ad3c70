<?php
while (ob_get_level() > 0) {
    ob_end_flush();
}
echo 'first';
flush();
echo 'second';
