<?php
// What the .user.ini files from the document root down to this directory set.
foreach (['default_charset', 'highlight.string', 'highlight.comment', 'allow_url_fopen', 'user_ini.filename'] as $name) {
    echo $name, '=', var_export(ini_get($name), true), "\n";
}
