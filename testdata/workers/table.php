<?php
// Shared tables under test (integration/tables_test.go): counters, checksummed rows written in
// loops while workers are killed, a table that fills up.
declare(strict_types=1);

require __DIR__ . '/../../php/autoload.php';

use Peregrine\Http\Request;
use Peregrine\Http\Response;
use Peregrine\Table;

// The checksum a row carries over its other columns, which the kill test verifies.
function rowSum(int $a, int $b, string $s, int $user): int
{
    return crc32("$a|$b|$s|$user");
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
                $row = ['a' => $a, 'b' => $a * 3, 's' => $s, 'user' => $user, 'sum' => rowSum($a, $a * 3, $s, $user)];
                if ($a % 5 === 0) {
                    $t->del($k);
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
                if ($row['sum'] !== rowSum($row['a'], $row['b'], $row['s'], $row['user']) || $row['b'] !== $row['a'] * 3) {
                    $bad++;
                }
                $again = $t->get($k);
                if ($again !== null && $again['sum'] !== rowSum($again['a'], $again['b'], $again['s'], $again['user'])) {
                    $bad++;
                }
            }
            for ($u = 0; $u < 7; $u++) {
                foreach ($t->where('user', $u) as $k => $row) {
                    $indexed++;
                    if ($row['user'] !== $u) {
                        $bad++;
                    }
                }
            }
            return new Response(200, [], json_encode(['rows' => $seen, 'count' => $t->count(), 'indexed' => $indexed, 'bad' => $bad]));
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
