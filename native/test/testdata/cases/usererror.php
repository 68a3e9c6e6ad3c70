<?php
echo 'before';
trigger_error('the application gave up', E_USER_ERROR);
echo 'after';
