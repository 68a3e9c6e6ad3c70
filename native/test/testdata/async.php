<?php
// A concurrent worker (PEREGRINE_CONCURRENCY > 1) for async_test.go; ASYNC_MODE=globals tries
// serveGlobals(), which must refuse.
declare(strict_types=1);

require __DIR__ . '/../../../php/autoload.php';

use Peregrine\Http\Request;
use Peregrine\Http\Response;
use Peregrine\Worker;

use function Peregrine\Async\async;
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
$worker->serve(static function (Request $r) use (&$finallyRan): Response {
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
        case '/mem':
            gc_collect_cycles();

            return new Response(200, [], (string) memory_get_usage());
        case '/finally':
            return new Response(200, [], (string) $finallyRan);
    }

    return new Response(404, [], 'no such path');
});
