<?php
header('Content-Type: text/plain');
echo 'partial ';
die('bye');
