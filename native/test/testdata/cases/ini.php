<?php
echo ini_get('precision');
ini_set('precision', '5');
set_time_limit(5);
