<?php
// Answer now, keep working after: what fastcgi_finish_request() is for.
header('Content-Type: text/plain');
header('X-Before-Finish: yes');
echo 'answered';
$finished = fastcgi_finish_request();
header('X-After-Finish: yes');
echo 'after finish, never seen';
file_put_contents(sys_get_temp_dir() . '/legacy-finish-' . getmypid(), var_export($finished, true));
unlink(sys_get_temp_dir() . '/legacy-finish-' . getmypid());
