<?php
// Included once per request; declares a function and counts its inclusions.
$GLOBALS['included'] = ($GLOBALS['included'] ?? 0) + 1;

function legacy_helper()
{
    return 'helper';
}

define('LEGACY_LOADED', true);
