<?php
// Boots when the file named by FLAKY_MARKER does not exist; crashes at boot when it does.
// Lets a test break a running deploy and mend it again.
declare(strict_types=1);

require __DIR__ . '/../../php/autoload.php';

use Peregrine\Http\Request;
use Peregrine\Http\Response;

$marker = getenv('FLAKY_MARKER');
if ($marker !== false && file_exists($marker)) {
    fwrite(STDERR, "boot failure injected by marker\n");
    exit(2);
}
Peregrine\Worker::create()->serve(function (Request $r): Response {
    if ($r->path === '/crash') {
        exit(3);
    }
    return new Response(200, [], (string) getmypid());
});
