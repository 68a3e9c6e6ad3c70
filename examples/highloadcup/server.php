<?php
// The HighLoad Cup 2017 server on Peregrine's shared tables: every worker answers from the same
// users, locations and visits, which load.php put there once.
//
//   GET  /users|locations|visits/{id}     the entity, or 404
//   GET  /users/{id}/visits               ?fromDate &toDate &country &toDistance: {"visits": [...]}
//   GET  /locations/{id}/avg              ?fromDate &toDate &fromAge &toAge &gender: {"avg": 3.5}
//   POST /users|locations|visits/{id}     update: {} or 400 / 404
//   POST /users|locations|visits/new      create: {} or 400
declare(strict_types=1);

require __DIR__ . '/../../php/autoload.php';
require __DIR__ . '/schema.php';

use Peregrine\Http\Request;
use Peregrine\Http\Response;
use Peregrine\Table;
use Peregrine\TableException;

$dir = getenv('HLC_DATA') ?: __DIR__ . '/data';
$now = (int) file("$dir/options.txt")[0];
$tables = ['users' => Table::open('users'), 'locations' => Table::open('locations'), 'visits' => Table::open('visits')];
$json = ['Content-Type' => 'application/json; charset=utf-8'];
$answer = static fn (int $status, string $body = '{}'): Response => new Response($status, $json, $body);

/** An int query parameter: absent is null, malformed is false. */
function intParam(array $q, string $name): int|null|false
{
    if (!isset($q[$name])) {
        return null;
    }
    return \is_string($q[$name]) && preg_match('/^-?\d{1,18}$/D', $q[$name]) ? (int) $q[$name] : false;
}

/** The birth date boundary of an age: born at or before it, one is at least $age years old. */
function bornBy(int $now, int $age): int
{
    return (new DateTimeImmutable('@' . $now))->modify("-$age years")->getTimestamp();
}

$userVisits = static function (int $id, array $q) use ($tables, $answer): Response {
    if (!$tables['users']->exists($id)) {
        return $answer(404);
    }
    $from = intParam($q, 'fromDate');
    $to = intParam($q, 'toDate');
    $dist = intParam($q, 'toDistance');
    $country = $q['country'] ?? null;
    if ($from === false || $to === false || $dist === false || ($country !== null && (!\is_string($country) || $country === ''))) {
        return $answer(400);
    }
    $out = [];
    foreach ($tables['visits']->where('user', $id) as $vid => $v) {
        if (($from !== null && $v['visited_at'] <= $from) || ($to !== null && $v['visited_at'] >= $to)) {
            continue;
        }
        $loc = $tables['locations']->get($v['location']);
        if ($loc === null || ($country !== null && $loc['country'] !== $country) || ($dist !== null && $loc['distance'] >= $dist)) {
            continue;
        }
        $out[] = [$v['visited_at'], $vid, ['mark' => $v['mark'], 'visited_at' => $v['visited_at'], 'place' => $loc['place']]];
    }
    sort($out);
    return $answer(200, json_encode(['visits' => array_column($out, 2)]));
};

$locationAvg = static function (int $id, array $q) use ($tables, $answer, $now): Response {
    if (!$tables['locations']->exists($id)) {
        return $answer(404);
    }
    $from = intParam($q, 'fromDate');
    $to = intParam($q, 'toDate');
    $fromAge = intParam($q, 'fromAge');
    $toAge = intParam($q, 'toAge');
    $gender = $q['gender'] ?? null;
    if ($from === false || $to === false || $fromAge === false || $toAge === false || ($gender !== null && $gender !== 'm' && $gender !== 'f')) {
        return $answer(400);
    }
    $oldest = $toAge !== null ? bornBy($now, $toAge) : null;     // age < toAge: born after it
    $youngest = $fromAge !== null ? bornBy($now, $fromAge) : null; // age >= fromAge: born by it
    $sum = $n = 0;
    foreach ($tables['visits']->where('location', $id) as $v) {
        if (($from !== null && $v['visited_at'] <= $from) || ($to !== null && $v['visited_at'] >= $to)) {
            continue;
        }
        if ($gender !== null || $oldest !== null || $youngest !== null) {
            $u = $tables['users']->get($v['user']);
            if ($u === null || ($gender !== null && $u['gender'] !== ($gender === 'm' ? 1 : 2))
                || ($oldest !== null && $u['birth_date'] <= $oldest) || ($youngest !== null && $u['birth_date'] > $youngest)) {
                continue;
            }
        }
        $sum += $v['mark'];
        $n++;
    }
    return $answer(200, json_encode(['avg' => $n > 0 ? round($sum / $n, 5) : 0]));
};

$post = static function (string $entity, string $id, string $body) use ($tables, $answer): Response {
    $new = $id === 'new';
    if (!$new && !ctype_digit($id)) {
        return $answer(404);
    }
    if (!$new && !$tables[$entity]->exists((int) $id)) {
        return $answer(404);
    }
    $fields = Schema::validate($entity, json_decode($body, true), $new);
    if ($fields === null || ($new && $tables[$entity]->exists($fields['id']))) {
        return $answer(400);
    }
    try {
        $tables[$entity]->set($new ? $fields['id'] : (int) $id, Schema::toRow($entity, $fields));
    } catch (TableException) { // a string longer than its column, a full table
        return $answer(400);
    }
    return $answer(200);
};

Peregrine\Worker::create()->serve(static function (Request $r) use ($tables, $answer, $userVisits, $locationAvg, $post): Response {
    $parts = explode('/', $r->path);
    $entity = $parts[1] ?? '';
    if (!isset($tables[$entity]) || \count($parts) < 3 || \count($parts) > 4) {
        return $answer(404);
    }
    if ($r->method === 'POST') {
        return \count($parts) === 3 ? $post($entity, $parts[2], $r->body) : $answer(404);
    }
    if (!ctype_digit($parts[2]) || \strlen($parts[2]) > 10) {
        return $answer(404);
    }
    $id = (int) $parts[2];
    if (\count($parts) === 3) {
        $row = $tables[$entity]->get($id);
        return $row === null ? $answer(404) : $answer(200, json_encode(Schema::fromRow($entity, $id, $row)));
    }
    return match ("$entity/{$parts[3]}") {
        'users/visits' => $userVisits($id, $r->queryParams),
        'locations/avg' => $locationAvg($id, $r->queryParams),
        default => $answer(404),
    };
});
