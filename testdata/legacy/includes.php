<?php
require_once __DIR__ . '/lib/counter.php';
require_once __DIR__ . '/lib/counter.php';
require_once 'lib/counter.php';
include_once 'lib/counter.php';
header('Content-Type: text/plain');
echo 'included=' . $included . ' ' . legacy_helper() . ' ' . var_export(LEGACY_LOADED, true) . "\n";
echo 'files=' . count(get_included_files()) . "\n";
echo 'cwd_is_dir=' . var_export(getcwd() === __DIR__, true) . "\n";
