<?php
header('Content-Type: text/plain');
echo 'initial=' . ignore_user_abort() . "\n";
echo 'previous=' . ignore_user_abort(true) . "\n";
echo 'now=' . ignore_user_abort() . "\n";
echo 'aborted=' . connection_aborted() . ' status=' . connection_status() . "\n";
