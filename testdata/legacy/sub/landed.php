<?php
require 'helper.php';
header('Content-Type: text/plain');
echo 'landed from=' . ($_GET['from'] ?? '') . ' ' . helper_name() . ' ' . basename(getcwd());
