<?php
// Peregrine\Table's behaviour, run as a script (native/test/table_test.go), printing one line per
// check; the test compares the output, and runs it again under valgrind.
declare(strict_types=1);

use Peregrine\Table;
use Peregrine\TableException;

function line(string $what, mixed $v): void
{
    echo $what, ': ', json_encode($v), "\n";
}

function fails(string $what, callable $f): void
{
    try {
        $f();
        echo $what, ": no exception\n";
    } catch (TableException $e) {
        echo $what, ': ', $e->getMessage(), "\n";
    }
}

$v = Table::open('visits');
line('empty', [$v->count(), $v->capacity(), $v->get(1), $v->exists(1), $v->del(1), $v->name()]);
$v->set(1, ['user' => 7, 'location' => 9, 'visited_at' => 1500000000, 'mark' => 5]);
$v->set(2, ['user' => 7, 'location' => 10, 'visited_at' => -1, 'mark' => -128]);
$v->set(3, ['user' => 8, 'location' => 10]);
line('get', $v->get(1));
line('column', [$v->get(2, 'visited_at'), $v->get(2, 'mark'), $v->get(3, 'mark'), $v->get(99, 'mark')]);
line('count', [count($v), $v->count(), $v->exists(2), $v->exists(4)]);
line('where user 7', $v->where('user', 7));
line('where location 10', array_keys($v->where('location', 10)));
$v->set(2, ['location' => 11]); // moves between index chains
line('moved', [array_keys($v->where('location', 10)), array_keys($v->where('location', 11)), $v->get(2)['user']]);
line('incr', [$v->incr(3, 'mark', 5), $v->decr(3, 'mark'), $v->decr(3, 'mark', 10), $v->incr(3, 'visited_at', PHP_INT_MAX)]);
line('incr indexed', [$v->incr(1, 'user', 1), array_keys($v->where('user', 8)), array_keys($v->where('user', 7))]);
line('incr creates', [$v->incr(50, 'location'), $v->get(50)]);
line('del', [$v->del(2), $v->del(2), $v->count(), array_keys($v->where('user', 7)), array_keys($v->where('location', 11))]);
$v->set(2, ['user' => 1]); // reuses the freed row
$keys = [];
foreach ($v as $k => $row) {
    $keys[$k] = $row['user'];
}
ksort($keys);
line('foreach', $keys);
line('nested foreach', (function () use ($v): int {
    $n = 0;
    foreach ($v as $a) {
        foreach ($v as $b) {
            $n++;
        }
    }
    return $n;
})());
line('iterator', iterator_count($v->getIterator()));
for ($i = 100; $i < 200; $i++) {
    $v->set($i, ['user' => $i % 3]);
}
for ($i = 100; $i < 200; $i += 2) {
    $v->del($i);
}
line('churn', [$v->count(), count($v->where('user', 0)) + count($v->where('user', 1)) + count($v->where('user', 2))]);
line('incr columns', [$v->incr(500, ['visited_at' => 5, 'mark' => 2]), $v->incr(500, ['mark' => -3, 'visited_at' => 1]), $v->decr(500, ['mark' => 1]), $v->get(500)]);
line('incr columns indexed', [$v->incr(500, ['user' => 40, 'location' => 41]), array_keys($v->where('user', 40)), array_keys($v->where('location', 41)), array_keys($v->where('user', 0)) === array_keys(array_filter(iterator_to_array($v), fn ($r) => $r['user'] === 0))]);
line('incr columns wrap', [$v->incr(500, ['mark' => 127]), $v->incr(500, ['mark' => 5])]);
line('cas', [$v->cas(500, 'mark', 0, 1), $v->cas(500, 'mark', -126, 7), $v->get(500, 'mark'), $v->cas(501, 'mark', 1, 2), $v->exists(501), $v->cas(501, 'mark', 0, 3), $v->get(501)]);
line('cas indexed', [$v->cas(501, 'user', 0, 41), array_keys($v->where('user', 41)), $v->cas(501, 'user', 0, 42), array_keys($v->where('user', 41)), $v->del(500), $v->del(501), $v->count()]);

$s = Table::open('sessions');
$s->set('abc', ['name' => 'hello', 'score' => 1.5]);
$s->set('', ['name' => '']);
line('string key', [$s->get('abc'), $s->get(''), $s->incr('abc', 'score', 0.25), $s->decr('abc', 'n', 3), $s->exists('ab')]);
line('binary', [$s->set("a\0b", ['name' => "x\0y"]), $s->get("a\0b", 'name') === "x\0y", $s->exists("a\0c")]);

fails('too long', fn () => $s->set('abc', ['name' => 'toolong']));
fails('unknown column', fn () => $s->set('abc', ['nope' => 1]));
fails('list', fn () => $s->set('abc', [1]));
fails('wrong type', fn () => $s->set('abc', ['n' => '5']));
fails('float for int', fn () => $s->set('abc', ['n' => 1.5]));
fails('int key for string', fn () => $s->get(5));
fails('key too long', fn () => $s->get('123456789'));
fails('string key for int', fn () => $v->get('5'));
fails('unknown table', fn () => Table::open('nope'));
fails('no index', fn () => $v->where('mark', 1));
fails('where unknown', fn () => $v->where('nope', 1));
fails('get unknown', fn () => $v->get(1, 'nope'));
fails('incr string', fn () => $s->incr('abc', 'name'));
fails('incr by float', fn () => $v->incr(1, 'mark', 1.5));
fails('int8 range', fn () => $v->set(1, ['mark' => 128]));
fails('int32 range', fn () => $v->set(1, ['user' => 1 << 31]));
fails('full', function () use ($s): void {
    for ($i = 0; $i < 10; $i++) {
        $s->set("k$i", ['n' => $i]);
    }
});
fails('full incr', fn () => $s->incr('zz', 'n'));
line('after errors', [$s->count(), $s->get('abc', 'name'), $v->get(1, 'mark')]);
line('cas types', [$s->cas('abc', 'name', 'hello', 'bye'), $s->get('abc', 'name'), $s->cas('abc', 'name', 'hello', 'x'), $s->cas('abc', 'score', 1.75, 2), $s->get('abc', 'score'), $s->cas('abc', 'n', -3, 4), $s->cas('abc', 'n', 4, PHP_INT_MIN), $s->get('abc', 'n')]);
line('incr columns float', $s->incr('abc', ['score' => 0.5, 'n' => 2]));
fails('cas full', fn () => $s->cas('zz', 'n', 0, 1));
line('cas full, no match', $s->cas('zz', 'n', 5, 1));
fails('cas wrong type', fn () => $s->cas('abc', 'n', '4', 5));
fails('cas too long', fn () => $s->cas('abc', 'name', 'bye', 'toolong'));
fails('cas int8 range', fn () => $v->cas(1, 'mark', 5, 128));
fails('cas unknown', fn () => $v->cas(1, 'nope', 0, 1));
fails('incr columns unknown', fn () => $v->incr(1, ['mark' => 1, 'nope' => 1]));
fails('incr columns string', fn () => $s->incr('abc', ['n' => 1, 'name' => 1]));
fails('incr columns float for int', fn () => $v->incr(1, ['mark' => 1.5]));
fails('incr columns not a number', fn () => $v->incr(1, ['mark' => '1']));
fails('incr columns list', fn () => $v->incr(1, [1, 2]));
fails('incr columns empty', fn () => $v->incr(1, []));
fails('incr columns and by', fn () => $v->incr(1, ['mark' => 1], 2));
line('after incr errors', [$v->get(1, 'mark'), $s->get('abc', 'n'), $s->count(), $v->count()]);
try {
    new Table();
} catch (Error $e) {
    line('new', $e->getMessage());
}
try {
    clone $v;
} catch (Error $e) {
    line('clone', $e->getMessage());
}
try {
    serialize($v);
} catch (Exception $e) {
    line('serialize', $e->getMessage());
}
line('final', [(new ReflectionClass(Table::class))->isFinal(), (new ReflectionClass(Table::class))->isInternal(), is_subclass_of(TableException::class, RuntimeException::class)]);
