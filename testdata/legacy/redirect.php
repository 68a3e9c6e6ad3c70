<?php
// The classic "redirect and stop".
if (!isset($_GET['to'])) {
    header('Location: /sub/landed.php?from=redirect');
    exit;
}
header('Location: ' . $_GET['to'], true, 301);
echo 'moved';
