<?php
// A site that sets its own session cookie parameters and regenerates the id at login.
session_name('LEGACYSESS');
session_set_cookie_params(['lifetime' => 3600, 'path' => '/', 'httponly' => true, 'samesite' => 'Lax']);
session_cache_limiter('private_no_expire');
session_start();
session_regenerate_id(true);
$_SESSION['at'] = 'login';
echo 'regenerated';
