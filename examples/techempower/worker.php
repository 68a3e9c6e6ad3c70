<?php
// TechEmpower's test types on Peregrine in worker mode (raw): one PDO connection per worker,
// opened on the first request that needs it and kept for the worker's life. tfb.php has the code.
declare(strict_types=1);

require __DIR__ . '/../../php/autoload.php';
require __DIR__ . '/tfb.php';

use Peregrine\Http\Request;
use Peregrine\Http\Response;

$db = null;
$pdo = static function () use (&$db): PDO {
    return $db ??= tfb_pdo(false);
};

Peregrine\Worker::create()->serve(static function (Request $request) use ($pdo): Response {
    [$status, $headers, $body] = tfb_handle($pdo, $request->path, $request->queryParams);
    $headers['Server'] = 'Peregrine';
    return new Response($status, $headers, $body);
});
