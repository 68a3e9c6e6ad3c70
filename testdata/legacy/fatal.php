<?php
header('X-Before-Fatal: yes');
echo 'partial output ';
undefined_function_called_on_purpose();
echo 'never';
