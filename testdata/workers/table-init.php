<?php
// tables.init for integration/tables_test.go: fills before any worker starts, or fails the start.
declare(strict_types=1);

require __DIR__ . '/../../php/autoload.php';

if (getenv('TABLE_INIT_FAIL') === '1') {
    throw new RuntimeException('the contest data is missing');
}
Peregrine\Table::open('counters')->set(2, ['n' => 42]);
echo "init filled counters\n";
