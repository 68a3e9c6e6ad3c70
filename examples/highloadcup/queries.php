<?php
// Writes a deterministic list of contest requests, one JSON object a line:
// {"method": "GET", "path": "/users/1/visits?fromDate=...", "body": null}. GETs of every kind
// (with and without each filter, malformed parameters, missing entities), then POST updates and
// creations (valid and invalid) each followed by GETs that must see them.
//
//   php queries.php DIR COUNT [gets-only]     DIR holds the data (for the entity counts)
declare(strict_types=1);

[$dir, $count, $getsOnly] = [$argv[1], (int) ($argv[2] ?? 1000), ($argv[3] ?? '') === 'gets-only'];
$n = static fn (string $e): int => array_sum(array_map(
    static fn (string $f): int => count(json_decode(file_get_contents($f), true)[$e]),
    glob("$dir/{$e}_*.json"),
));
[$users, $locations, $visits] = [$n('users'), $n('locations'), $n('visits')];
mt_srand(42, MT_RAND_MT19937);
$countries = ['Россия', 'Германия', 'Франция', 'Испания', 'Италия', 'Китай', 'Нигде'];
$out = static function (string $method, string $path, ?array $body = null): void {
    echo json_encode(['method' => $method, 'path' => $path, 'body' => $body === null ? null : json_encode($body)]), "\n";
};
$q = static fn (array $p): string => $p === [] ? '' : '?' . http_build_query($p);
$maybe = static fn (array $p): array => array_filter($p, static fn (): bool => mt_rand(0, 2) === 0);
$date = static fn (): int => mt_rand(946684800, 1420070399);

for ($i = 0; $i < $count; $i++) {
    $kind = $getsOnly ? mt_rand(0, 5) : mt_rand(0, 9);
    $id = mt_rand(1, (int) ($users * 1.02) + 1); // now and then one that does not exist
    switch ($kind) {
        case 0:
            $out('GET', '/users/' . $id);
            break;
        case 1:
            $out('GET', '/locations/' . mt_rand(1, $locations + 5));
            break;
        case 2:
            $out('GET', '/visits/' . mt_rand(1, $visits + 5));
            break;
        case 3:
        case 4:
            $p = $maybe(['fromDate' => $date(), 'toDate' => $date(), 'country' => $countries[mt_rand(0, 6)], 'toDistance' => mt_rand(1, 100)]);
            if (mt_rand(0, 20) === 0) {
                $p['fromDate'] = 'abc';
            }
            $out('GET', "/users/$id/visits" . $q($p));
            break;
        case 5:
            $p = $maybe(['fromDate' => $date(), 'toDate' => $date(), 'fromAge' => mt_rand(10, 50), 'toAge' => mt_rand(20, 70), 'gender' => mt_rand(0, 1) ? 'm' : 'f']);
            if (mt_rand(0, 20) === 0) {
                $p['gender'] = 'x';
            }
            $out('GET', '/locations/' . mt_rand(1, $locations + 5) . '/avg' . $q($p));
            break;
        case 6: // update a visit: moves it between users and locations
            $vid = mt_rand(1, $visits);
            $body = $maybe(['user' => mt_rand(1, $users), 'location' => mt_rand(1, $locations), 'mark' => mt_rand(0, 5), 'visited_at' => $date()]);
            if (mt_rand(0, 10) === 0) {
                $body['mark'] = null;
            }
            $out('POST', "/visits/$vid", $body);
            $out('GET', "/visits/$vid");
            $out('GET', '/users/' . ($body['user'] ?? 1) . '/visits');
            $out('GET', '/locations/' . ($body['location'] ?? 1) . '/avg');
            break;
        case 7: // update a user
            $body = $maybe(['email' => "new$i@example.org", 'first_name' => 'Зоя', 'gender' => mt_rand(0, 1) ? 'm' : 'f', 'birth_date' => mt_rand(-631152000, 946684800)]);
            if (mt_rand(0, 10) === 0) {
                $body['birth_date'] = '1990';
            }
            $out('POST', "/users/$id", $body);
            $out('GET', "/users/$id");
            $out('GET', "/users/$id");
            break;
        case 8: // a new location and a visit to it
            $lid = $locations + 10 + $i;
            $out('POST', '/locations/new', ['id' => $lid, 'place' => 'Новое место', 'country' => 'Россия', 'city' => 'Москва', 'distance' => mt_rand(1, 100)]);
            $out('POST', '/visits/new', ['id' => $visits + 10 + $i, 'location' => $lid, 'user' => mt_rand(1, $users), 'visited_at' => $date(), 'mark' => mt_rand(0, 5)]);
            $out('POST', '/visits/new', ['id' => 1, 'location' => $lid, 'user' => 1, 'visited_at' => 0, 'mark' => 1]); // id taken: 400
            $out('GET', "/locations/$lid/avg");
            $out('GET', "/locations/$lid/avg");
            break;
        default: // malformed
            $out('POST', '/users/new', ['id' => $users + 100 + $i, 'email' => 'x@y.z']); // fields missing: 400
            $out('GET', '/users/bad');
            $out('GET', '/nothing/1');
    }
}
