<?php
// Slim 3 under nginx + PHP-FPM: the whole app is built for every request, as usual.
declare(strict_types=1);

$app = require __DIR__ . '/../app.php';
$app->run();
