<?php
// The whole $_SERVER, in order, with what filter_input() reads for INPUT_SERVER (the filter
// extension's raw copies), as [key, value] pairs; the request times as their types.
$pairs = static function (array $a): array {
    $out = [];
    foreach ($a as $k => $v) {
        $out[] = [$k, $k === 'REQUEST_TIME' || $k === 'REQUEST_TIME_FLOAT' ? gettype($v) : $v];
    }
    return $out;
};
echo json_encode([
    'server' => $pairs($_SERVER),
    'raw' => $pairs(filter_input_array(INPUT_SERVER, FILTER_UNSAFE_RAW) ?? []),
    'has' => filter_has_var(INPUT_SERVER, 'HTTP_X_MULTI'),
    'input' => filter_input(INPUT_SERVER, 'HTTP_X_ANGLE'),
    'default' => ini_get('filter.default'),
]);
