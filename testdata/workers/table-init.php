<?php
// tables.init for integration/tables_test.go: fills before any worker starts, or fails the start.
declare(strict_types=1);

require __DIR__ . '/../../php/autoload.php';

if (getenv('TABLE_INIT_FAIL') === '1') {
    throw new RuntimeException('the contest data is missing');
}
// A long load: TABLE_INIT_CPU_MS milliseconds of CPU time, what max_execution_time counts.
$cpu = static function (): float {
    $u = getrusage();
    return $u['ru_utime.tv_sec'] + $u['ru_utime.tv_usec'] / 1e6 + $u['ru_stime.tv_sec'] + $u['ru_stime.tv_usec'] / 1e6;
};
$until = $cpu() + (int)(getenv('TABLE_INIT_CPU_MS') ?: 0) / 1000;
$wall = hrtime(true) + 30e9;
while ($cpu() < $until && hrtime(true) < $wall) {
}
Peregrine\Table::open('counters')->set(2, ['n' => 42]);
echo "init filled counters\n";
