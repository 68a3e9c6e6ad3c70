<?php
echo 'done';
fastcgi_finish_request();
echo 'lost';
file_put_contents($_GET['marker'], 'ran on');
