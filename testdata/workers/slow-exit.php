<?php
// A worker that takes SLOW_EXIT_MS to exit once told to stop, as a direct-mode worker draining
// its connections does, then leaves a file named by its pid in EXIT_MARK_DIR: it was not killed.
declare(strict_types=1);

require __DIR__ . '/../../php/autoload.php';

use Peregrine\Http\Request;
use Peregrine\Http\Response;

Peregrine\Worker::create()->serve(fn (Request $r): Response => new Response(200, [], (string) getmypid()));
usleep((int) getenv('SLOW_EXIT_MS') * 1000);
file_put_contents(getenv('EXIT_MARK_DIR') . '/' . getmypid(), 'drained');
