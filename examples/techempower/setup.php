<?php
// Creates TechEmpower's tables in the database TFB_DSN names (see tfb.php), idempotently:
// World (10,000 rows, id 1..10000, randomNumber 1..10000) and Fortune (the 12 fortunes of
// TechEmpower's data set). Existing tables of those names are dropped first.
declare(strict_types=1);

require __DIR__ . '/tfb.php';

$pdo = tfb_pdo(false);
$text = $pdo->getAttribute(PDO::ATTR_DRIVER_NAME) === 'pgsql' ? 'varchar(2048)' : 'varchar(2048) CHARACTER SET utf8mb4';
$pdo->exec('DROP TABLE IF EXISTS World');
$pdo->exec('DROP TABLE IF EXISTS Fortune');
$pdo->exec('CREATE TABLE World (id integer NOT NULL PRIMARY KEY, randomNumber integer NOT NULL DEFAULT 0)');
$pdo->exec("CREATE TABLE Fortune (id integer NOT NULL PRIMARY KEY, message $text NOT NULL)");

$pdo->beginTransaction();
for ($start = 1; $start <= 10000; $start += 500) {
    $rows = [];
    for ($id = $start; $id < $start + 500; $id++) {
        $rows[] = '(' . $id . ',' . mt_rand(1, 10000) . ')';
    }
    $pdo->exec('INSERT INTO World (id, randomNumber) VALUES ' . implode(',', $rows));
}
$fortunes = [
    1 => 'fortune: No such file or directory',
    2 => "A computer scientist is someone who fixes things that aren't broken.",
    3 => 'After enough decimal places, nobody gives a damn.',
    4 => 'A bad random number generator: 1, 1, 1, 1, 1, 4.33e+67, 1, 1, 1',
    5 => 'A computer program does what you tell it to do, not what you want it to do.',
    6 => 'Emacs is a nice operating system, but I prefer UNIX. — Tom Christaensen',
    7 => 'Any program that runs right is obsolete.',
    8 => 'A list is only as strong as its weakest link. — Donald Knuth',
    9 => 'Feature: A bug with seniority.',
    10 => 'Computers make very fast, very accurate mistakes.',
    11 => '<script>alert("This should not be displayed in a browser alert box.");</script>',
    12 => 'フレームワークのベンチマーク',
];
$insert = $pdo->prepare('INSERT INTO Fortune (id, message) VALUES (?, ?)');
foreach ($fortunes as $id => $message) {
    $insert->execute([$id, $message]);
}
$pdo->commit();
$n = $pdo->query('SELECT count(*) FROM World')->fetchColumn();
echo "World: $n rows, Fortune: " . count($fortunes) . " rows\n";
