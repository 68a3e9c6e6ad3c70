<?php
// TechEmpower Framework Benchmarks' six test types, shared by worker.php (Peregrine worker mode)
// and index.php (PHP-FPM, classic style): plaintext, json, db, queries, fortunes, updates.
// The database is named by TFB_DSN ("mysql:host=127.0.0.1;port=3306;dbname=..." or
// "pgsql:host=127.0.0.1;port=5432;dbname=...") and TFB_USER; setup.php creates its tables.
declare(strict_types=1);

/** A PDO for TFB_DSN; $persistent keeps the connection across requests of a PHP-FPM child. */
function tfb_pdo(bool $persistent): PDO
{
    $dsn = getenv('TFB_DSN');
    if ($dsn === false || $dsn === '') {
        throw new RuntimeException('TFB_DSN is not set');
    }
    $user = getenv('TFB_USER');
    return new PDO($dsn, $user === false ? null : $user, null, [
        PDO::ATTR_ERRMODE => PDO::ERRMODE_EXCEPTION,
        PDO::ATTR_DEFAULT_FETCH_MODE => PDO::FETCH_NUM,
        PDO::ATTR_EMULATE_PREPARES => false,
        PDO::ATTR_PERSISTENT => $persistent,
    ]);
}

/** The queries parameter of the test types: an integer clamped to 1..500, 1 when missing or not a number. */
function tfb_count(mixed $q): int
{
    if (!is_string($q) || !is_numeric($q)) {
        return 1;
    }
    return max(1, min(500, (int) $q));
}

/** A prepared statement of $pdo, prepared once per connection. */
function tfb_stmt(PDO $pdo, string $sql): PDOStatement
{
    static $cache = [];
    $key = spl_object_id($pdo) . "\0" . $sql;
    return $cache[$key] ??= $pdo->prepare($sql);
}

/** @return array{id: int, randomNumber: int} one random row of World */
function tfb_world(PDO $pdo, int $id): array
{
    $s = tfb_stmt($pdo, 'SELECT id, randomNumber FROM World WHERE id = ?');
    $s->execute([$id]);
    $row = $s->fetch();
    $s->closeCursor();
    if ($row === false) {
        throw new RuntimeException("World row $id is missing");
    }
    return ['id' => (int) $row[0], 'randomNumber' => (int) $row[1]];
}

/** @return list<array{id: int, randomNumber: int}> $n random rows, each its own query */
function tfb_worlds(PDO $pdo, int $n): array
{
    $out = [];
    for ($i = 0; $i < $n; $i++) {
        $out[] = tfb_world($pdo, mt_rand(1, 10000));
    }
    return $out;
}

/** @return list<array{id: int, randomNumber: int}> $n random rows read one by one, each given a new random number, written back */
function tfb_update(PDO $pdo, int $n): array
{
    $worlds = tfb_worlds($pdo, $n);
    $new = [];
    foreach ($worlds as $i => $w) {
        $id = $w['id'];
        if (!isset($new[$id])) {
            do {
                $r = mt_rand(1, 10000);
            } while ($r === $w['randomNumber']);
            $new[$id] = $r;
        }
        $worlds[$i]['randomNumber'] = $new[$id];
    }
    // One statement per row, in id order, each its own transaction: no two requests can wait on
    // each other's locks (a batched UPDATE ... CASE can deadlock on PostgreSQL, whose scan order
    // is not the id order once rows have moved).
    ksort($new);
    $s = tfb_stmt($pdo, 'UPDATE World SET randomNumber = ? WHERE id = ?');
    foreach ($new as $id => $r) {
        $s->execute([$r, $id]);
    }
    return $worlds;
}

/** The fortunes page: every row of Fortune plus one added at request time, sorted by message, escaped. */
function tfb_fortunes(PDO $pdo): string
{
    $s = tfb_stmt($pdo, 'SELECT id, message FROM Fortune');
    $s->execute();
    $fortunes = [];
    foreach ($s->fetchAll() as $row) {
        $fortunes[(int) $row[0]] = $row[1];
    }
    $fortunes[0] = 'Additional fortune added at request time.';
    asort($fortunes, SORT_STRING);
    $html = '<!DOCTYPE html><html><head><title>Fortunes</title></head><body><table><tr><th>id</th><th>message</th></tr>';
    foreach ($fortunes as $id => $message) {
        $html .= '<tr><td>' . $id . '</td><td>' . htmlspecialchars($message, ENT_QUOTES, 'UTF-8') . '</td></tr>';
    }
    return $html . '</table></body></html>';
}

/**
 * Answers one request: [status, headers, body]. $pdo is called when the test type needs the
 * database, so plaintext and json never connect.
 *
 * @param callable(): PDO $pdo
 * @param array<string, mixed> $query
 * @return array{int, array<string, string>, string}
 */
function tfb_handle(callable $pdo, string $path, array $query): array
{
    $json = static fn (mixed $v): array => [200, ['Content-Type' => 'application/json'], json_encode($v, JSON_THROW_ON_ERROR)];
    return match ($path) {
        '/plaintext' => [200, ['Content-Type' => 'text/plain'], 'Hello, World!'],
        '/json' => $json(['message' => 'Hello, World!']),
        '/db' => $json(tfb_world($pdo(), mt_rand(1, 10000))),
        '/queries' => $json(tfb_worlds($pdo(), tfb_count($query['queries'] ?? null))),
        '/updates' => $json(tfb_update($pdo(), tfb_count($query['queries'] ?? null))),
        '/fortunes' => [200, ['Content-Type' => 'text/html; charset=utf-8'], tfb_fortunes($pdo())],
        default => [404, ['Content-Type' => 'text/plain'], "not found\n"],
    };
}
