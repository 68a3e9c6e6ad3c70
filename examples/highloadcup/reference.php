<?php
// The HighLoad Cup answers computed in plain PHP, from arrays, without Peregrine: reads the data
// and a query list (queries.php) and prints one answer a line, {"status": 200, "body": ...}
// with the body decoded. The example's test compares the server with it.
//
//   php reference.php DIR QUERIES
declare(strict_types=1);

[$dir, $queries] = [$argv[1], $argv[2]];
ini_set('memory_limit', '-1');
$now = (int) file("$dir/options.txt")[0];
$db = [];
foreach (['users', 'locations', 'visits'] as $e) {
    foreach (glob("$dir/{$e}_*.json") as $f) {
        foreach (json_decode(file_get_contents($f), true)[$e] as $row) {
            $db[$e][$row['id']] = $row;
        }
    }
}
$types = [
    'users' => ['id' => 'i', 'email' => 's', 'first_name' => 's', 'last_name' => 's', 'gender' => 'g', 'birth_date' => 'i'],
    'locations' => ['id' => 'i', 'place' => 's', 'country' => 's', 'city' => 's', 'distance' => 'i'],
    'visits' => ['id' => 'i', 'location' => 'i', 'user' => 'i', 'visited_at' => 'i', 'mark' => 'i'],
];

function age(int $birth, int $now): int
{
    return (new DateTime('@' . $birth))->diff(new DateTime('@' . $now))->y;
}

function num(array $q, string $k): int|null|false
{
    return !isset($q[$k]) ? null : (preg_match('/^-?\d+$/', $q[$k]) ? (int) $q[$k] : false);
}

function answer(array &$db, array $types, int $now, string $method, string $path, ?string $body): array
{
    $url = parse_url($path);
    parse_str($url['query'] ?? '', $q);
    $p = explode('/', $url['path']);
    $e = $p[1];
    if (!isset($db[$e])) {
        return [404, []];
    }
    if ($method === 'POST') {
        $data = json_decode($body, true);
        $new = $p[2] === 'new';
        if (!$new && !isset($db[$e][(int) $p[2]])) {
            return [404, []];
        }
        foreach ($data as $k => $v) {
            $t = $types[$e][$k] ?? null;
            if ($t === null || $v === null || ($t === 'i' && !is_int($v)) || ($t === 's' && !is_string($v)) || ($t === 'g' && $v !== 'm' && $v !== 'f')
                || (!$new && $k === 'id')) {
                return [400, []];
            }
        }
        if ($new) {
            if (count($data) !== count($types[$e]) || isset($db[$e][$data['id']])) {
                return [400, []];
            }
            $db[$e][$data['id']] = $data;
        } else {
            $db[$e][(int) $p[2]] = array_merge($db[$e][(int) $p[2]], $data);
        }
        return [200, []];
    }
    if (!ctype_digit($p[2])) {
        return [404, []];
    }
    $id = (int) $p[2];
    if (!isset($db[$e][$id])) {
        return [404, []];
    }
    if (count($p) === 3) {
        return [200, $db[$e][$id]];
    }
    if ($e === 'users' && $p[3] === 'visits') {
        [$from, $to, $dist] = [num($q, 'fromDate'), num($q, 'toDate'), num($q, 'toDistance')];
        $country = $q['country'] ?? null;
        if ($from === false || $to === false || $dist === false || $country === '') {
            return [400, []];
        }
        $list = [];
        foreach ($db['visits'] as $v) {
            $l = $db['locations'][$v['location']] ?? null;
            if ($v['user'] !== $id || $l === null || ($from !== null && $v['visited_at'] <= $from) || ($to !== null && $v['visited_at'] >= $to)
                || ($country !== null && $l['country'] !== $country) || ($dist !== null && $l['distance'] >= $dist)) {
                continue;
            }
            $list[] = ['mark' => $v['mark'], 'visited_at' => $v['visited_at'], 'place' => $l['place'], 'id' => $v['id']];
        }
        usort($list, static fn (array $a, array $b): int => [$a['visited_at'], $a['id']] <=> [$b['visited_at'], $b['id']]);
        return [200, ['visits' => array_map(static function (array $v): array {
            unset($v['id']);
            return $v;
        }, $list)]];
    }
    if ($e === 'locations' && $p[3] === 'avg') {
        [$from, $to, $fromAge, $toAge] = [num($q, 'fromDate'), num($q, 'toDate'), num($q, 'fromAge'), num($q, 'toAge')];
        $gender = $q['gender'] ?? null;
        if ($from === false || $to === false || $fromAge === false || $toAge === false || ($gender !== null && $gender !== 'm' && $gender !== 'f')) {
            return [400, []];
        }
        $marks = [];
        foreach ($db['visits'] as $v) {
            $u = $db['users'][$v['user']] ?? null;
            if ($v['location'] !== $id || $u === null || ($from !== null && $v['visited_at'] <= $from) || ($to !== null && $v['visited_at'] >= $to)
                || ($gender !== null && $u['gender'] !== $gender)
                || ($fromAge !== null && age($u['birth_date'], $now) < $fromAge) || ($toAge !== null && age($u['birth_date'], $now) >= $toAge)) {
                continue;
            }
            $marks[] = $v['mark'];
        }
        return [200, ['avg' => $marks === [] ? 0 : round(array_sum($marks) / count($marks), 5)]];
    }
    return [404, []];
}

foreach (file($queries) as $line) {
    $r = json_decode($line, true);
    [$status, $body] = answer($db, $types, $now, $r['method'], $r['path'], $r['body']);
    echo json_encode(['status' => $status, 'body' => $body === [] ? new stdClass() : $body]), "\n";
}
