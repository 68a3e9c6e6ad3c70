<?php
// A concurrent worker (PEREGRINE_CONCURRENCY > 1) for async_test.go; ASYNC_MODE=globals tries
// serveGlobals(), which must refuse.
declare(strict_types=1);

require __DIR__ . '/../../../php/autoload.php';

use Peregrine\Async\Pool;
use Peregrine\Http\Request;
use Peregrine\Http\Response;
use Peregrine\Worker;

use function Peregrine\Async\async;
use function Peregrine\Async\await;
use function Peregrine\Async\awaitAll;

usleep(1000); // at boot: PHP's own usleep, outside any fiber

$worker = Worker::create();
if (getenv('ASYNC_MODE') === 'handle') { // what --laravel and --symfony loop on
    while (peregrine_handle_request(static function (): void {
        echo 'served';
    })) {
    }
    exit(0);
}
if (getenv('ASYNC_MODE') === 'globals') {
    $worker->serveGlobals(static function (): void {
        echo 'served';
    });
    exit(0);
}

if (getenv('ASYNC_MODE') === 'psr') {
    require_once '/usr/share/php/Nyholm/Psr7/autoload.php';
    $factory = new Nyholm\Psr7\Factory\Psr17Factory();
    $worker->servePsr(static function (Psr\Http\Message\ServerRequestInterface $r) use ($factory): Psr\Http\Message\ResponseInterface {
        $q = $r->getQueryParams();
        usleep((int) ($q['us'] ?? 0));

        return $factory->createResponse(201)->withHeader('X-Id', (string) $q['id'])->withBody($factory->createStream('psr=' . $q['id']));
    }, $factory);
    exit(0);
}

if (getenv('ASYNC_MODE') === 'amp') { // Aerys style: a generator coroutine yielding Amp promises
    require_once '/usr/share/php/Amp/autoload.php';
    require_once '/usr/share/php/Amp/functions.php';
    require_once '/usr/share/php/Amp/Internal/functions.php';
    $worker->serve(static function (Request $r): Generator {
        $q = $r->queryParams;
        yield Amp\delay((int) $q['ms']);
        $value = yield Amp\call(static function () use ($q): Generator {
            yield new Amp\Delayed(1);

            return 'amp=' . $q['id'];
        });

        return new Response(200, [], $value);
    });
    exit(0);
}

$finallyRan = 0;
$produced = $cut = 0;

// /pool: a pool of 10 PDO connections to the test's own database (ASYNC_POOL_DB), shared by every
// request of the worker.
$poolDb = (string) getenv('ASYNC_POOL_DB');
$pool = new Pool(static fn (): PDO => new PDO("mysql:host=127.0.0.1;port=3306;dbname=$poolDb", 'root', '', [PDO::ATTR_ERRMODE => PDO::ERRMODE_EXCEPTION]), size: 10);
$poolPeak = 0;
$worker->serve(static function (Request $r) use (&$finallyRan, $pool, &$poolPeak, &$produced, &$cut): Response {
    $q = $r->queryParams;
    $mine = (string) ($q['id'] ?? '');
    switch ($r->path) {
        case '/sleep': // each request keeps its own value across its waits
            usleep((int) ($q['us'] ?? 0));
            $after = $mine;
            time_nanosleep(0, (int) ($q['ns'] ?? 0));
            sleep(0);

            return new Response(200, ['X-Id' => $mine], "id=$after");
        case '/stream':
            $parts = (function () use ($mine, $q): Generator {
                for ($i = 0; $i < (int) $q['n']; $i++) {
                    usleep((int) $q['us']);
                    yield "$mine:$i\n";
                }
            })();

            return new Response(200, [], $parts);
        case '/tcp': // a line to a socket and the line that comes back, through stream_socket_client
            $s = stream_socket_client('tcp://127.0.0.1:' . $q['port'], $errno, $error, 5);
            if ($s === false) {
                return new Response(500, [], "connect: $error");
            }
            fwrite($s, "$mine\n");
            $line = (string) fgets($s);
            fclose($s);

            return new Response(200, [], trim($line));
        case '/fsock':
            $s = fsockopen('127.0.0.1', (int) $q['port'], $errno, $error, 5);
            fwrite($s, "$mine\n");
            $line = (string) fgets($s);
            fclose($s);

            return new Response(200, [], trim($line));
        case '/unix':
            $s = stream_socket_client('unix://' . $q['path'], $errno, $error, 5);
            fwrite($s, "$mine\n");
            $line = (string) fgets($s);
            fclose($s);

            return new Response(200, [], trim($line));
        case '/http':
            return new Response(200, [], (string) file_get_contents('http://127.0.0.1:' . $q['port'] . '/?id=' . $mine));
        case '/async': // two waits inside one request, side by side
            $values = awaitAll([
                async(static function () use ($mine): string {
                    usleep(2000);

                    return "a$mine";
                }),
                async(static function () use ($mine): string {
                    usleep(1000);

                    return "b$mine";
                }),
            ]);

            return new Response(200, [], implode(',', $values));
        case '/pdo': // PDO MySQL over tcp
            $pdo = new PDO('mysql:host=127.0.0.1;port=3306;dbname=test', 'root', '');
            $row = $pdo->query(sprintf('SELECT SLEEP(%F) AS s, %d AS id', (float) $q['sleep'], (int) $mine))->fetch(PDO::FETCH_ASSOC);

            return new Response(200, [], 'pdo:' . $row['id']);
        case '/mysqli': // mysqli over the unix socket
            $db = new mysqli('localhost', 'root', '', 'test');
            $row = $db->query(sprintf('SELECT SLEEP(%F) AS s, %d AS id', (float) $q['sleep'], (int) $mine))->fetch_assoc();
            $db->close();

            return new Response(200, [], 'mysqli:' . $row['id']);
        case '/shared': // one connection for every request: the mistake the 2014 error names
            static $shared = [];
            try {
                if ($q['db'] === 'pdo') {
                    $shared['pdo'] ??= new PDO('mysql:host=127.0.0.1;port=3306;dbname=test', 'root', '', [PDO::ATTR_ERRMODE => PDO::ERRMODE_EXCEPTION]);
                    $shared['pdo']->query(sprintf('SELECT SLEEP(%F)', (float) $q['sleep']))->fetchAll();
                } else {
                    $shared['mysqli'] ??= new mysqli('127.0.0.1', 'root', '', 'test');
                    $shared['mysqli']->query(sprintf('SELECT SLEEP(%F)', (float) $q['sleep']))->fetch_all();
                }
            } catch (Throwable $e) {
                return new Response(500, [], $e->getMessage());
            }

            return new Response(200, [], 'ok');
        case '/pool': // a query on a connection of the pool, which waits when all 10 are lent
            $row = $pool->use(static function (PDO $db) use ($pool, &$poolPeak, $q): array {
                $poolPeak = max($poolPeak, $pool->lent());

                return $db->query(sprintf('SELECT CONNECTION_ID() AS c, SLEEP(%F) AS s, (SELECT COUNT(*) FROM t) AS n', (float) $q['sleep']))->fetch(PDO::FETCH_ASSOC);
            });

            return new Response(200, [], "conn={$row['c']} rows={$row['n']}");
        case '/pool-stats':
            return new Response(200, [], "connections={$pool->connections()} peak=$poolPeak lent={$pool->lent()}");
        case '/unbuffered': // 2014 in one request alone: not a connection shared between fibers
            $pdo = new PDO('mysql:host=127.0.0.1;port=3306;dbname=test', 'root', '', [PDO::ATTR_ERRMODE => PDO::ERRMODE_EXCEPTION, PDO::MYSQL_ATTR_USE_BUFFERED_QUERY => false]);
            $unread = $pdo->query('SELECT 1 UNION SELECT 2');
            try {
                $pdo->query('SELECT 3');
            } catch (PDOException $e) {
                return new Response(500, [], $e->getMessage());
            }

            return new Response(200, [], 'no error');
        case '/busy': // blocking code: keeps the worker from switching
            $until = hrtime(true) + 150_000_000;
            while (hrtime(true) < $until) {
            }

            return new Response(200, [], 'busy');
        case '/throw':
            usleep(1000);
            throw new RuntimeException('handler failed ' . $mine);
        case '/len':
            usleep(1000);

            return new Response(200, [], $mine . ':' . strlen($r->body) . ':' . md5($r->body));
        case '/hang':
            try {
                sleep(60);
            } finally {
                $finallyRan++;
            }

            return new Response(200, [], 'woke');
        case '/blpop': // phpredis: a blocking pop that another request's push ends
            $redis = new Redis();
            $redis->connect('127.0.0.1', 6379);
            $got = $redis->blPop([(string) $q['key']], 5);
            $redis->close();

            return new Response(200, [], 'popped:' . ($got[1] ?? 'nothing'));
        case '/rpush':
            $redis = new Redis();
            $redis->connect('127.0.0.1', 6379);
            $redis->rPush((string) $q['key'], $mine);
            $redis->close();

            return new Response(200, [], 'pushed');
        case '/tls': // TLS: OpenSSL's handshake, reads and writes wait through poll()
            $context = stream_context_create(['ssl' => ['verify_peer' => false, 'verify_peer_name' => false]]);
            $s = stream_socket_client('tls://127.0.0.1:' . $q['port'], $errno, $error, 5, STREAM_CLIENT_CONNECT, $context);
            if ($s === false) {
                return new Response(500, [], "connect: $error");
            }
            fwrite($s, "$mine\n");
            $line = (string) fgets($s);
            fclose($s);

            return new Response(200, [], trim($line));
        case '/https':
            $context = stream_context_create(['ssl' => ['verify_peer' => false, 'verify_peer_name' => false]]);

            return new Response(200, [], (string) file_get_contents('https://127.0.0.1:' . $q['port'] . '/?id=' . $mine, false, $context));
        case '/header': // PHP's own header(), setcookie() and http_response_code(): the request's own
            header("X-Mine: a$mine");
            setcookie("c$mine", 'v');
            http_response_code(200 + (int) $mine % 50);
            header('X-Id: not this one'); // the Response's X-Id replaces it
            await(async(static function () use ($mine, $q): void {
                usleep((int) ($q['us'] ?? 0));
                header("X-Async: $mine");
            }));
            usleep((int) ($q['us'] ?? 0));
            header("X-Mine2: b$mine");
            if (isset($q['throw'])) {
                throw new RuntimeException('after header()');
            }
            isset($q['late']) && async(static function () use ($mine): void { // outlives its request: its header goes nowhere
                usleep(100);
                header("X-Late: $mine");
            });

            return new Response(200, ['X-Id' => $mine], http_response_code() . ' ' . \count(headers_list()));
        case '/obuf': // an output buffer of its own across a wait: its own output only; leave=1|2 leaves one open (2: not removable)
            $level = ob_get_level();
            ob_start();
            echo "<$mine>";
            usleep((int) ($q['us'] ?? 0));
            echo "</$mine>";
            $page = (string) ob_get_clean();
            if (isset($q['leave'])) {
                $q['leave'] === '2' ? ob_start(null, 0, 0) : ob_start();
                echo "left $mine\n";
            }

            return new Response(200, [], "$level $page");
        case '/late_ob': // an async() fiber that outlives its request, in a buffer of its own across a wait
            async(static function () use ($mine): void {
                ob_start();
                echo "mine $mine";
                usleep(20000);
                error_log("late_ob $mine: " . var_export(@ob_get_clean(), true));
            });
            usleep(1000);

            return new Response(200, [], 'ok');
        case '/late_handler': // an async() fiber suspended inside its output handler when its request ends
            async(static function () use ($mine): void {
                ob_start(static function (string $b): string {
                    usleep(20000);

                    return $b;
                });
                echo "handled $mine\n";
                ob_end_flush();
                error_log("late_handler $mine flushed at level " . ob_get_level());
            });
            usleep(1000);

            return new Response(200, [], 'ok');
        case '/left_throwing': // leaves open a buffer whose handler throws at its end; us: waits that long first
            ob_start(static function (string $b, int $phase): string {
                if ($phase & PHP_OUTPUT_HANDLER_FINAL) {
                    throw new RuntimeException('the handler threw');
                }

                return $b;
            });
            echo "left $mine\n";
            usleep((int) ($q['us'] ?? 0));

            return new Response(200, [], 'ok');
        case '/mem':
            gc_collect_cycles();

            return new Response(200, [], (string) memory_get_usage());
        case '/finally':
            return new Response(200, [], (string) $finallyRan);
        case '/big': // an answer of n bytes, larger than a socket takes at once
            return new Response(200, [], str_repeat('x', (int) ($q['n'] ?? 0)));
        case '/blob': // n bytes, each 64 KiB block led by its number (a part cut, repeated or out of order shows); stream=1: a part a block
            $n = (int) $q['n'];
            $block = static fn (int $i): string => substr(sprintf('%08d', $i) . str_repeat('0123456789abcdef', 4096), 0, min(65536, $n - $i * 65536));
            if (!isset($q['stream'])) {
                $body = '';
                for ($i = 0; $i * 65536 < $n; $i++) {
                    $body .= $block($i);
                }

                return new Response(200, [], $body);
            }
            $parts = (static function () use ($n, $block, &$produced, &$cut): Generator {
                $whole = false;
                try {
                    for ($i = 0; $i * 65536 < $n; $i++) {
                        $part = $block($i);
                        $produced += strlen($part);
                        yield $part;
                    }
                    $whole = true;
                } finally {
                    $cut += (int) !$whole; // its fiber was cancelled while it streamed
                }
            })();

            return new Response(200, [], $parts);
        case '/produced': // what /blob's streams made, and how many were cut short
            return new Response(200, [], "$produced $cut");
    }

    return new Response(404, [], 'no such path');
});
