<?php
header('Content-Type: text/plain');
echo 'sub index: ' . $_SERVER['SCRIPT_NAME'] . ' ' . $_SERVER['REQUEST_URI'] . ' cwd=' . var_export(getcwd() === __DIR__, true);
