<?php
echo 'ignored ', $_SERVER['CONTENT_LENGTH'], ' bytes';
