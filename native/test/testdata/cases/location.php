<?php
header('Location: /next');
echo 'redirecting';
exit;
echo 'not reached';
