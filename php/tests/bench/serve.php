<?php
// Per-request cost of the worker loop, for php/README.md. Not a test; run it with OPcache on:
//
//   php -d opcache.enable_cli=1 php/tests/bench/serve.php [requests]
//
// "in-process": Worker::serve*() over N frames held in memory, responses written to /dev/null
// (one fwrite each): the PHP cost of a request, no waiting on the server.
// "round trip": a real worker process behind pipes, one request at a time, as a lone client
// would see it from the server's side (process wake-ups included).
declare(strict_types=1);

require __DIR__ . '/../bootstrap.php';
require_once '/usr/share/php/Nyholm/Psr7/autoload.php';

use Nyholm\Psr7\Factory\Psr17Factory;
use Peregrine\Http\Request;
use Peregrine\Http\Response;
use Peregrine\Internal\Connection;
use Peregrine\Internal\Frame;
use Peregrine\Internal\RequestDecoder;
use Peregrine\Worker;
use Psr\Http\Message\ServerRequestInterface;

$n = (int) ($argv[1] ?? 100000);
if (!(bool) ini_get('opcache.enable_cli')) {
    fwrite(STDERR, "warning: OPcache is off; run with -d opcache.enable_cli=1\n");
}

$fields = static fn (string $uri): array => ['GET', $uri, strtok($uri, '?'), (string) parse_url($uri, PHP_URL_QUERY),
    'HTTP/1.1', '127.0.0.1', '54321', '127.0.0.1', '8080', 'http', ''];
$requests = [
    // What wrk or hey send.
    'minimal GET' => Frame::request(1, $fields('/'), [], [['host', '127.0.0.1:8080']]),
    // A browser: 8 headers, a cookie, a query string.
    'browser GET' => Frame::request(1, $fields('/products?page=2&sort=price'), [], [
        ['host', 'example.com'],
        ['user-agent', 'Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0 Safari/537.36'],
        ['accept', 'text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8'],
        ['accept-language', 'en-US,en;q=0.9'],
        ['accept-encoding', 'gzip, deflate, br'],
        ['connection', 'keep-alive'],
        ['cookie', 'session=abc123; theme=dark'],
        ['cache-control', 'max-age=0'],
    ]),
];

/** Best of 3 runs, in microseconds per call. */
function best(callable $run, int $n): float
{
    $best = INF;
    for ($round = 0; $round < 3; ++$round) {
        $t = hrtime(true);
        $run($n);
        $best = min($best, (hrtime(true) - $t) / $n / 1000);
    }

    return $best;
}

function worker(string $input): Worker
{
    $in = fopen('php://memory', 'w+b');
    fwrite($in, $input);
    rewind($in);
    $class = new ReflectionClass(Worker::class);
    $worker = $class->newInstanceWithoutConstructor();
    $class->getConstructor()->invoke($worker, new Connection($in, fopen('/dev/null', 'wb')), STDERR);

    return $worker;
}

$factory = new Psr17Factory();
$generic = new class () extends Psr17Factory {
};
$modes = [
    'serve()' => static fn (Worker $w) => $w->serve(static fn (Request $r): Response => new Response(200, ['Content-Type' => 'text/plain'], 'Hello, world!')),
    'servePsr(), Nyholm fast path' => static fn (Worker $w) => $w->servePsr(static fn (ServerRequestInterface $r) => $factory->createResponse(200)
        ->withHeader('Content-Type', 'text/plain')->withBody($factory->createStream('Hello, world!')), $factory),
    'servePsr(), generic PSR-17' => static fn (Worker $w) => $w->servePsr(static fn (ServerRequestInterface $r) => $generic->createResponse(200)
        ->withHeader('Content-Type', 'text/plain')->withBody($generic->createStream('Hello, world!')), $generic),
    'serveGlobals()' => static fn (Worker $w) => $w->serveGlobals(static function (): void {
        Peregrine\Http\header('Content-Type: text/plain');
        echo 'Hello, world!';
    }),
];

printf("PHP %s, OPcache %s, %d requests\n\nin-process, per request:\n", PHP_VERSION, ini_get('opcache.enable_cli') ? 'on' : 'off', $n);
foreach ($requests as $label => $frame) {
    foreach ($modes as $mode => $serve) {
        $input = str_repeat($frame, $n);
        printf("  %-30s %-12s %6.2f us\n", $mode, $label, best(static fn (int $n) => $serve(worker($input)), $n));
    }
}

printf("\nRequest decoding alone (lazy properties untouched / all four read):\n");
foreach ($requests as $label => $frame) {
    $payload = substr($frame, Frame::HEADER_SIZE);
    $lazy = best(static function (int $n) use ($payload): void {
        for ($i = 0; $i < $n; ++$i) {
            RequestDecoder::decode($payload);
        }
    }, $n);
    $all = best(static function (int $n) use ($payload): void {
        for ($i = 0; $i < $n; ++$i) {
            $r = RequestDecoder::decode($payload);
            $r->queryParams;
            $r->cookies;
            $r->parsedBody;
            $r->files;
        }
    }, $n);
    printf("  %-12s %6.2f us / %6.2f us\n", $label, $lazy, $all);
}

printf("\nround trip through pipes, one request at a time:\n");
$scripts = [
    'serve()' => '$w->serve(fn ($r) => new Peregrine\Http\Response(200, ["Content-Type" => "text/plain"], "Hello, world!"));',
    'servePsr(), Nyholm fast path' => '$f = new Nyholm\Psr7\Factory\Psr17Factory(); $w->servePsr(fn ($r) => $f->createResponse(200)'
        . '->withHeader("Content-Type", "text/plain")->withBody($f->createStream("Hello, world!")), $f);',
];
foreach ($scripts as $mode => $code) {
    $script = tempnam(sys_get_temp_dir(), 'peregrine-bench-');
    file_put_contents($script, '<?php require ' . var_export(realpath(__DIR__ . '/../../autoload.php'), true) . ';'
        . 'require "/usr/share/php/Nyholm/Psr7/autoload.php"; $w = Peregrine\Worker::create(); ' . $code);
    $process = proc_open([PHP_BINARY, '-d', 'opcache.enable_cli=1', $script], [3 => ['pipe', 'r'], 4 => ['pipe', 'w']], $pipes, null,
        ['PEREGRINE_PROTOCOL' => '3'] + getenv());
    [3 => $to, 4 => $from] = $pipes;
    fread($from, 65536); // READY
    $frame = $requests['minimal GET'];
    $perRequest = best(static function (int $n) use ($to, $from, $frame): void {
        for ($i = 0; $i < $n; ++$i) {
            fwrite($to, $frame);
            fread($from, 65536);
        }
    }, intdiv($n, 4));
    fclose($to);
    proc_close($process);
    unlink($script);
    printf("  %-30s %-12s %6.2f us\n", $mode, 'minimal GET', $perRequest);
}
