<?php
// Top-level variables are globals; the function is declared in every request, without a guard.
$counter = 0;
$config = ['site' => 'legacy'];

function bump()
{
    global $counter;
    $counter++;
    static $calls = 0;
    return ++$calls;
}

function site()
{
    return $GLOBALS['config']['site'];
}

class Registry
{
    public static $items = [];
}

bump();
bump();
$calls = bump();
Registry::$items[] = 'x';
header('Content-Type: text/plain');
echo "counter=$counter calls=$calls site=" . site() . ' items=' . count(Registry::$items) . "\n";
echo 'in_globals=' . var_export(array_key_exists('counter', $GLOBALS), true) . "\n";
echo 'defined_before=' . var_export(isset($previous), true) . "\n";
$previous = true;
