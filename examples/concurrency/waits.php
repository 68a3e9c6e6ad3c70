<?php
// The waits of the concurrency benchmark, shared by worker.php (Peregrine, concurrent) and
// fpm/index.php (nginx + PHP-FPM): each waits 50 ms on something real, written the ordinary,
// blocking way. Under `workers.concurrency` > 1 each suspends only its own request.
//   /sleep  usleep(50000)
//   /mysql  PDO MySQL `SELECT SLEEP(0.05)`  (BENCH_MYSQL_DSN, default 127.0.0.1:3306, root)
//   /http   file_get_contents() of BENCH_HTTP_URL, an endpoint that answers after 50 ms
//   /redis  phpredis BLPOP on an empty list, timing out after 50 ms (BENCH_REDIS, default 127.0.0.1:6379)
declare(strict_types=1);

/** Runs the wait for $path; returns the body to answer, or null for an unknown path. */
function concurrency_wait(string $path, ConnectionPool $mysql, ConnectionPool $redis): ?string
{
    switch ($path) {
        case '/sleep':
            usleep(50000);
            return 'slept';
        case '/mysql':
            return $mysql->with(static fn (PDO $db): string => (string) $db->query('SELECT SLEEP(0.05)')->fetchColumn());
        case '/http':
            $body = file_get_contents((string) getenv('BENCH_HTTP_URL'));
            if ($body === false) {
                throw new RuntimeException('file_get_contents failed');
            }
            return $body;
        case '/redis':
            // An empty list of this process's own: BLPOP always times out (50 ms) and creates nothing.
            // rawCommand: Debian's phpredis takes only whole seconds in blPop().
            return $redis->with(static fn (Redis $r): string => json_encode($r->rawCommand('BLPOP', 'peregrine-bench:empty:' . getmypid(), '0.05')));
    }
    return null;
}

/**
 * Connections kept per process and lent to one request at a time: under concurrency a connection
 * must not be used by two requests at once (docs/concurrency.md, "Isolation rules").
 */
final class ConnectionPool
{
    /** @var list<object> */
    private array $idle = [];

    /** @param Closure(): object $open */
    public function __construct(private readonly Closure $open)
    {
    }

    public function with(Closure $use): mixed
    {
        $conn = array_pop($this->idle) ?? ($this->open)();
        try {
            $result = $use($conn);
        } catch (Throwable $e) {
            $conn = null; // a connection that failed mid-query is not lent again
            throw $e;
        } finally {
            if ($conn !== null) {
                $this->idle[] = $conn;
            }
        }
        return $result;
    }
}

/**
 * The MySQL and Redis pools. $persistent (PHP-FPM: one request per process) keeps the
 * connection open across requests, as PDO::ATTR_PERSISTENT and pconnect() do there.
 *
 * @return array{ConnectionPool, ConnectionPool}
 */
function concurrency_pools(bool $persistent = false): array
{
    $mysql = new ConnectionPool(static fn (): PDO => new PDO(
        getenv('BENCH_MYSQL_DSN') ?: 'mysql:host=127.0.0.1;port=3306',
        'root',
        '',
        [PDO::ATTR_ERRMODE => PDO::ERRMODE_EXCEPTION, PDO::ATTR_PERSISTENT => $persistent],
    ));
    $redis = new ConnectionPool(static function () use ($persistent): Redis {
        [$host, $port] = explode(':', getenv('BENCH_REDIS') ?: '127.0.0.1:6379');
        $r = new Redis();
        $persistent ? $r->pconnect($host, (int) $port, 2.0) : $r->connect($host, (int) $port, 2.0);
        $r->setOption(Redis::OPT_READ_TIMEOUT, 5);
        return $r;
    });
    return [$mysql, $redis];
}
