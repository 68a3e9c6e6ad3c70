<?php
// Sets PG_ENV_PROBE from ?set=, after reporting what $_SERVER and getenv() saw at the start.
$seen = [$_SERVER['PG_ENV_PROBE'] ?? null, getenv('PG_ENV_PROBE') ?: null];
if (isset($_GET['set'])) {
    putenv('PG_ENV_PROBE=' . $_GET['set']);
}
echo json_encode($seen);
