<?php
// tables.init of the HighLoad Cup example: loads the contest's JSON files (users_*.json,
// locations_*.json, visits_*.json) from $HLC_DATA (default ./data) into the shared tables, once,
// before any worker starts.
declare(strict_types=1);

require __DIR__ . '/../../php/autoload.php';
require __DIR__ . '/schema.php';

use Peregrine\Table;

$dir = getenv('HLC_DATA') ?: __DIR__ . '/data';
if (!is_file("$dir/options.txt")) {
    fwrite(STDERR, "no contest data in $dir (options.txt is missing): run php generate.php $dir small\n");
    exit(1);
}
$start = microtime(true);
$counts = [];
foreach (['users', 'locations', 'visits'] as $entity) {
    $table = Table::open($entity);
    $files = glob("$dir/{$entity}_*.json");
    natsort($files);
    $n = 0;
    foreach ($files as $file) {
        $data = json_decode(file_get_contents($file), true, 4, JSON_THROW_ON_ERROR);
        foreach ($data[$entity] as $row) {
            $table->set($row['id'], Schema::toRow($entity, $row));
            $n++;
        }
        unset($data);
    }
    $counts[] = "$n $entity";
}
printf("loaded %s in %.1f s\n", implode(', ', $counts), microtime(true) - $start);
