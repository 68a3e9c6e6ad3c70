<?php
// Writes HighLoad Cup 2017 data in the contest's format: users_N.json, locations_N.json and
// visits_N.json of up to 10,000 entities each ({"users": [...]}), and options.txt (the
// contest's "now" on its first line, 1 for a rating run on the second). Deterministic: the same
// size gives the same bytes.
//
//   php generate.php DIR [full|small|USERS LOCATIONS VISITS]
//
// full is the contest's size (1,000,000 users, 1,000,000 locations, 11,000,000 visits); small
// (1,000, 1,000, 11,000) is what the tests use.
declare(strict_types=1);

const NOW = 1503695452; // the contest's timestamp (2017-08-25 21:10:52 UTC)
const PER_FILE = 10000;

[$dir, $size] = [$argv[1] ?? null, $argv[2] ?? 'small'];
if ($dir === null) {
    fwrite(STDERR, "usage: php generate.php DIR [full|small|USERS LOCATIONS VISITS]\n");
    exit(64);
}
[$users, $locations, $visits] = match ($size) {
    'full' => [1_000_000, 1_000_000, 11_000_000],
    'small' => [1_000, 1_000, 11_000],
    default => [(int) $size, (int) ($argv[3] ?? 0), (int) ($argv[4] ?? 0)],
};
if ($users < 1 || $locations < 1 || $visits < 0) {
    fwrite(STDERR, "sizes must be positive\n");
    exit(64);
}
@mkdir($dir, 0o777, true);
mt_srand(2017, MT_RAND_MT19937);

$first = ['Иван', 'Пётр', 'Анна', 'Мария', 'Сергей', 'Ольга', 'Алексей', 'Елена', 'Дмитрий', 'Наталья', 'Никита', 'Вера', 'Павел', 'Софья'];
$last = ['Иванов', 'Смирнова', 'Кузнецов', 'Попова', 'Соколов', 'Лебедева', 'Козлов', 'Новикова', 'Морозов', 'Волкова', 'Фёдоров'];
$countries = ['Россия', 'Германия', 'Франция', 'Испания', 'Италия', 'Китай', 'Япония', 'Бразилия', 'Канада', 'Египет', 'Индия',
    'Мексика', 'Турция', 'Греция', 'Норвегия', 'Финляндия', 'Аргентина', 'Чили', 'Перу', 'Австрия'];
$words = ['Набережная', 'Музей', 'Парк', 'Собор', 'Замок', 'Мост', 'Площадь', 'Башня', 'Театр', 'Рынок', 'Озеро', 'Гора'];
$cities = [];
for ($i = 0; $i < 300; $i++) {
    $cities[] = $words[$i % count($words)] . 'град' . ($i > 11 ? $i : '');
}
$domains = ['mail.ru', 'yandex.ru', 'gmail.com', 'list.ru', 'inbox.com'];

/** Writes $count entities of $name made by $make($id), PER_FILE to a file. */
function write(string $dir, string $name, int $count, callable $make): void
{
    for ($file = 1, $id = 1; $id <= $count; $file++) {
        $batch = [];
        for ($n = 0; $n < PER_FILE && $id <= $count; $n++, $id++) {
            $batch[] = $make($id);
        }
        file_put_contents("$dir/{$name}_$file.json", json_encode([$name => $batch]));
    }
}

$pick = static fn (array $a): mixed => $a[mt_rand(0, count($a) - 1)];
write($dir, 'users', $users, static fn (int $id): array => [
    'id' => $id,
    'email' => sprintf('%s%d@%s', strtolower(base_convert((string) mt_rand(), 10, 36)), $id, $pick($domains)),
    'first_name' => $pick($first),
    'last_name' => $pick($last),
    'gender' => mt_rand(0, 1) === 0 ? 'm' : 'f',
    'birth_date' => mt_rand(-631152000, 946684800), // 1950 .. 2000
]);
write($dir, 'locations', $locations, static fn (int $id): array => [
    'id' => $id,
    'place' => $pick($words) . ' ' . $pick($words),
    'country' => $pick($countries),
    'city' => $pick($cities),
    'distance' => mt_rand(1, 100),
]);
write($dir, 'visits', $visits, static fn (int $id): array => [
    'id' => $id,
    'location' => mt_rand(1, $locations),
    'user' => mt_rand(1, $users),
    'visited_at' => mt_rand(946684800, 1420070399), // 2000 .. 2014
    'mark' => mt_rand(0, 5),
]);
file_put_contents("$dir/options.txt", NOW . "\n1\n");
fwrite(STDERR, "wrote $users users, $locations locations, $visits visits to $dir\n");
