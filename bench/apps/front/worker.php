<?php
// The 20 KB page (page.php), Peregrine raw mode. Compression is the server's (http.compression).
declare(strict_types=1);

require __DIR__ . '/../../../php/autoload.php';
require __DIR__ . '/page.php';

use Peregrine\Http\Request;
use Peregrine\Http\Response;

Peregrine\Worker::create()->serve(static function (Request $request): Response {
    return new Response(200, ['Content-Type' => 'text/html; charset=UTF-8'], front_page());
});
