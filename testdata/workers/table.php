<?php
// Shared tables under test (integration/tables_test.go): counters, checksummed rows written in
// loops while workers are killed, a table that fills up.
declare(strict_types=1);

require __DIR__ . '/../../php/autoload.php';

use Peregrine\Http\Request;
use Peregrine\Http\Response;
use Peregrine\Table;

// The checksum a row carries over its string and user columns, which the kill test verifies
// (b is always 3a, which incr() of both keeps). A row incr() created holds zeros: its sum is 0.
function rowSum(string $s, int $user): int
{
    return $s === '' && $user === 0 ? 0 : crc32("$s|$user");
}

// Whether a row of the rows table is whole: b is 3a and sum is its checksum.
function rowWhole(array $row): bool
{
    return $row['b'] === $row['a'] * 3 && $row['sum'] === rowSum($row['s'], $row['user']);
}

// Writes until the stop flag (counters row 9) is set or 20 s passed: a writer of the where()
// test. It counts itself in counters row 8 once it runs, and says how it stopped.
function untilStopped(callable $write): array
{
    $flag = Table::open('counters');
    $flag->incr(8, 'n');
    $end = hrtime(true) + 20e9;
    $n = 0;
    while (($stopped = $flag->get(9, 'n') === 1) === false && hrtime(true) < $end) {
        for ($i = 0; $i < 64; $i++, $n++) {
            $write($n);
        }
    }
    return ['writes' => $n, 'stopped' => $stopped];
}

Peregrine\Worker::create()->serve(function (Request $r): Response {
    $q = $r->queryParams;
    switch ($r->path) {
        case '/incr':
            $c = Table::open('counters');
            for ($i = (int) ($q['n'] ?? 1); $i > 0; $i--) {
                $c->incr(1, 'n');
            }
            return new Response(200, [], 'ok');
        case '/get':
            return new Response(200, [], json_encode(Table::open($q['table'])->get((int) $q['key'])));
        case '/gets':
            return new Response(200, [], json_encode(Table::open('scores')->get($q['key'])));
        case '/set':
            Table::open('counters')->set((int) $q['key'], ['n' => (int) $q['n']]);
            return new Response(200, [], 'ok');
        case '/write':
            // Rewrites random rows, each consistent with its checksum, as fast as PHP goes.
            $t = Table::open('rows');
            $rows = (int) ($q['rows'] ?? 100);
            for ($i = (int) ($q['loops'] ?? 1000); $i > 0; $i--) {
                $k = mt_rand(1, $rows);
                $a = mt_rand();
                $s = str_repeat(chr(65 + $a % 26), $a % 41);
                $user = $a % 7;
                $row = ['a' => $a, 'b' => $a * 3, 's' => $s, 'user' => $user, 'sum' => rowSum($s, $user)];
                if ($a % 5 === 0) {
                    $t->del($k);
                } elseif ($a % 5 === 1) {
                    $d = $a % 1000; // both columns at once, or (after a kill) neither
                    $t->incr($k, ['a' => $d, 'b' => 3 * $d]);
                } else {
                    $t->set($k, $row);
                }
            }
            return new Response(200, [], 'ok');
        case '/check':
            // Every row, by iteration, by get() and by the index, against its checksum.
            $t = Table::open('rows');
            $seen = $bad = $indexed = 0;
            foreach ($t as $k => $row) {
                $seen++;
                if (!rowWhole($row)) {
                    $bad++;
                }
                $again = $t->get($k);
                if ($again !== null && !rowWhole($again)) {
                    $bad++;
                }
            }
            for ($u = 0; $u < 7; $u++) {
                foreach ($t->where('user', $u) as $k => $row) {
                    $indexed++;
                    if ($row['user'] !== $u || !rowWhole($row)) {
                        $bad++;
                    }
                }
            }
            return new Response(200, [], json_encode(['rows' => $seen, 'count' => $t->count(), 'indexed' => $indexed, 'bad' => $bad]));
        case '/chain-fill':
            // One long index chain: rows 1..n of the chain table, all of user 7, b = 3a.
            $t = Table::open('chain');
            for ($k = (int) $q['n']; $k > 0; $k--) {
                $t->set($k, ['a' => $k, 'b' => 3 * $k, 'user' => 7]);
            }
            return new Response(200, [], (string) $t->count());
        case '/chain-write':
            // Writes the chain's rows without a pause until told to stop: rewrites, multi-column
            // increments, and rows 1..10 moved to user 8 and back.
            $t = Table::open('chain');
            $rows = (int) $q['n'];
            $n = untilStopped(function (int $i) use ($t, $rows): void {
                $k = mt_rand(1, $rows);
                if ($k <= 10) {
                    $t->set($k, ['user' => $i % 2 === 0 ? 8 : 7]);
                } elseif ($i % 2 === 0) {
                    $t->incr($k, ['a' => 1, 'b' => 3]);
                } else {
                    $a = mt_rand();
                    $t->set($k, ['a' => $a, 'b' => 3 * $a]);
                }
            });
            return new Response(200, [], json_encode($n));
        case '/chain-where':
            // where() over the chain, again and again: each answer one consistent moment.
            $t = Table::open('chain');
            $calls = (int) $q['calls'];
            $out = ['min' => PHP_INT_MAX, 'max' => 0, 'bad' => 0, 'ms' => 0.0];
            $start = hrtime(true);
            for ($c = 0; $c < $calls; $c++) {
                $rows = $t->where('user', 7);
                $out['min'] = min($out['min'], count($rows));
                $out['max'] = max($out['max'], count($rows));
                foreach ($rows as $k => $row) {
                    if ($row['user'] !== 7 || $row['b'] !== 3 * $row['a']) {
                        $out['bad']++;
                    }
                }
            }
            $out['ms'] = (hrtime(true) - $start) / 1e6 / $calls;
            return new Response(200, [], json_encode($out));
        case '/score':
            // n multi-column increments and n compare-and-set increments of one counter; every
            // read of the row sees score = 5 x games.
            $t = Table::open('scores');
            $bad = $retries = 0;
            for ($i = (int) $q['n']; $i > 0; $i--) {
                $t->incr('p', ['score' => 5, 'games' => 1]);
                for (;;) {
                    $v = $t->get('q', 'cnt') ?? 0;
                    if ($t->cas('q', 'cnt', $v, $v + 1)) {
                        break;
                    }
                    $retries++;
                }
                $r = $t->get('p');
                if ($r['score'] !== 5 * $r['games']) {
                    $bad++;
                }
            }
            return new Response(200, [], json_encode(['bad' => $bad, 'retries' => $retries]));
        case '/fill':
            $t = Table::open('small');
            try {
                for ($i = 0; $i <= $t->capacity(); $i++) {
                    $t->set("k$i", ['v' => $i]);
                }
                return new Response(200, [], 'never full');
            } catch (Peregrine\TableException $e) {
                return new Response(200, [], $e->getMessage());
            }
        case '/open':
            try {
                return new Response(200, [], (string) Table::open($q['table'])->capacity());
            } catch (Peregrine\TableException $e) {
                return new Response(500, [], $e->getMessage());
            }
        case '/pid':
            return new Response(200, [], (string) getmypid());
    }
    return new Response(404, [], 'no route');
});
