<?php
// A worker for workers.concurrency above 1 that waits on clients outside PHP's stream layer
// (integration/blocking_clients_test.go): libpq and libcurl. Each route makes one call and
// answers what the other end answered; the test's other end answers "met" only once a second
// request has reached it while the first still waits, which a worker blocked by the first call
// never lets happen.
//
//   /pg?dsn=D&n=N        pg_query() of SELECT barrier(N) on a new connection to D
//   /pdo?dsn=D&n=N       the same through PDO pgsql
//   /pg-send?dsn=D&n=N   the same with pg_send_query() and pg_get_result()
//   /pg-two?dsn=D&n=N    two /pg queries at once in this request, each in an async() fiber
//   /curl?url=U          curl_exec() of U
//   /curl-two?url=U      two curl_exec() at once in this request, each in an async() fiber
//   /multi?url=U&n=N     N handles of U in one curl_multi, curl_multi_exec()/curl_multi_select()
// Each call is made in a try whose finally writes "finally ran: PATH" to STDERR.
declare(strict_types=1);

require __DIR__ . '/../../php/autoload.php';

use Peregrine\Http\Request;
use Peregrine\Http\Response;

use function Peregrine\Async\{async, awaitAll};

/** @return \CurlHandle a handle that fetches $url into a string */
function handle(string $url): \CurlHandle
{
    $h = curl_init($url);
    curl_setopt_array($h, [CURLOPT_RETURNTRANSFER => true, CURLOPT_TIMEOUT => 30]);

    return $h;
}

function pgQuery(string $dsn, int $n): string
{
    $c = pg_connect($dsn, PGSQL_CONNECT_FORCE_NEW);

    return pg_fetch_row(pg_query_params($c, 'SELECT barrier($1)', [$n]))[0];
}

function pgSend(string $dsn, int $n): string
{
    $c = pg_connect($dsn, PGSQL_CONNECT_FORCE_NEW);
    pg_send_query_params($c, 'SELECT barrier($1)', [$n]);

    return pg_fetch_row(pg_get_result($c))[0];
}

function curlMulti(string $url, int $n): string
{
    $m = curl_multi_init();
    $hs = [];
    for ($i = 0; $i < $n; $i++) {
        curl_multi_add_handle($m, $hs[] = handle($url));
    }
    do {
        curl_multi_exec($m, $running);
    } while ($running > 0 && curl_multi_select($m, 5.0) !== -1);

    return implode(' ', array_map(curl_multi_getcontent(...), $hs));
}

Peregrine\Worker::create()->serve(function (Request $r): Response {
    $q = $r->queryParams;
    $dsn = (string) ($q['dsn'] ?? '');
    $n = (int) ($q['n'] ?? 1);
    $url = (string) ($q['url'] ?? '');
    try {
        $answer = match ($r->path) {
            '/pg' => pgQuery($dsn, $n),
            '/pdo' => (string) (new PDO('pgsql:' . $dsn))->query('SELECT barrier(' . $n . ')')->fetchColumn(),
            '/pg-send' => pgSend($dsn, $n),
            '/pg-two' => implode(' ', awaitAll([async(pgQuery(...), $dsn, $n), async(pgQuery(...), $dsn, $n)])),
            '/curl' => (string) curl_exec(handle($url)),
            '/curl-two' => implode(' ', awaitAll([async(static fn () => (string) curl_exec(handle($url))), async(static fn () => (string) curl_exec(handle($url)))])),
            '/multi' => curlMulti($url, $n),
            default => 'no such route',
        };
    } finally {
        fwrite(STDERR, "finally ran: {$r->path}\n");
    }

    return new Response(200, ['Content-Type' => 'text/plain'], $answer);
});
