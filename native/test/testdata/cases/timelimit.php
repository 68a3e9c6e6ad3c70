<?php
// Burns ?cpu= milliseconds of this process's CPU time (what max_execution_time counts), after
// set_time_limit(?limit=) when given; prints "done" when it got through.
if (isset($_GET['limit'])) {
    set_time_limit((int)$_GET['limit']);
}
$cpu = static function (): float {
    $u = getrusage();
    return $u['ru_utime.tv_sec'] + $u['ru_utime.tv_usec'] / 1e6 + $u['ru_stime.tv_sec'] + $u['ru_stime.tv_usec'] / 1e6;
};
$until = $cpu() + (int)($_GET['cpu'] ?? 0) / 1000;
$wall = hrtime(true) + 20e9; // a bound of its own, should the clock above stall
while ($cpu() < $until && hrtime(true) < $wall) {
}
echo "done";
