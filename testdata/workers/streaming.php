<?php
// Streaming, early hints and X-Sendfile (integration/streaming_test.go). `streaming.php` serves
// in raw mode, `streaming.php psr` in PSR-7 mode. A stream waits between its parts until the
// test creates the signal file go-N (or all) in the directory ?dir= names, so the test decides
// when each part is made and never relies on timing.
declare(strict_types=1);

require __DIR__ . '/../../php/autoload.php';

use Peregrine\Http\Request;
use Peregrine\Http\Response;

use function Peregrine\Http\earlyHints;

/** Waits for $dir/go-$i or $dir/all, for 20 seconds at most. */
function await(string $dir, int $i): void
{
    $deadline = microtime(true) + 20;
    while (!file_exists("$dir/go-$i") && !file_exists("$dir/all")) {
        if (microtime(true) > $deadline) {
            throw new RuntimeException("no signal go-$i in $dir within 20s");
        }
        usleep(2000);
    }
}

/** Server-sent events 1 to $n, event $i made once go-$i exists (the first at once). */
function events(string $dir, int $n): Generator
{
    for ($i = 1; $i <= $n; $i++) {
        if ($i > 1) {
            await($dir, $i);
        }
        yield "id: $i\ndata: event $i\n\n";
    }
}

/** The same events written by a shell to a pipe: a PSR-7 body that is not seekable. */
function eventPipe(string $dir, int $n): mixed
{
    $script = 'i=1; while [ $i -le ' . $n . ' ]; do
        if [ $i -gt 1 ]; then
            w=0; while [ ! -e "$D/go-$i" ] && [ ! -e "$D/all" ] && [ $w -lt 2000 ]; do sleep 0.01; w=$((w+1)); done
        fi
        printf "id: %d\ndata: event %d\n\n" $i $i; i=$((i+1))
    done';

    return popen('D=' . escapeshellarg($dir) . ' sh -c ' . escapeshellarg($script), 'rb');
}

$worker = Peregrine\Worker::create();
if (($argv[1] ?? '') === 'psr') {
    require '/usr/share/php/Nyholm/Psr7/autoload.php';
    $factory = new Nyholm\Psr7\Factory\Psr17Factory();
    $worker->servePsr(function (Psr\Http\Message\ServerRequestInterface $r) use ($factory): Psr\Http\Message\ResponseInterface {
        $q = $r->getQueryParams();
        if ($r->getUri()->getPath() === '/events') {
            return $factory->createResponse(200)->withHeader('Content-Type', 'text/event-stream')
                ->withBody(Nyholm\Psr7\Stream::create(eventPipe((string) $q['dir'], (int) $q['n'])));
        }
        return $factory->createResponse(200)->withBody($factory->createStream((string) getmypid()));
    }, $factory);
    return;
}

$worker->serve(function (Request $r): Response {
    $q = $r->queryParams;
    switch ($r->path) {
        case '/events':
            return new Response(200, ['Content-Type' => 'text/event-stream', 'Cache-Control' => 'no-cache'], events((string) $q['dir'], (int) $q['n']));
        case '/hints':
            $sent = earlyHints(['Link' => ['</style.css>; rel=preload; as=style', '</app.js>; rel=preload; as=script']]);
            return new Response(200, ['Content-Type' => 'text/html', 'X-Hints-Sent' => $sent ? 'yes' : 'no'], 'page');
        case '/sendfile':
            return new Response(200, ['X-Sendfile' => (string) $q['file'], 'Content-Type' => 'text/csv',
                'Content-Disposition' => 'attachment; filename="report.csv"'], 'the body PHP would have sent');
        case '/accel':
            return new Response(200, ['X-Accel-Redirect' => (string) $q['uri']], '');
        default:
            return new Response(200, [], (string) getmypid());
    }
});
