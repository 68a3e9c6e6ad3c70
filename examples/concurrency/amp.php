<?php
// Peregrine worker of the concurrency benchmark (issue 17): an Amp v2 generator coroutine,
// Aerys style, yielding Amp\delay(50). Needs Debian's php-amphp-amp and `workers.concurrency` > 1.
declare(strict_types=1);

require __DIR__ . '/../../php/autoload.php';
// Debian's autoload.php leaves out the function files Composer would load.
require '/usr/share/php/Amp/autoload.php';
require_once '/usr/share/php/Amp/functions.php';
require_once '/usr/share/php/Amp/Internal/functions.php';

use Peregrine\Http\Request;
use Peregrine\Http\Response;

Peregrine\Worker::create()->serve(static function (Request $request): Generator {
    yield Amp\delay(50);
    return new Response(200, ['Content-Type' => 'text/plain'], 'delayed');
});
