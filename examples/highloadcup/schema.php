<?php
// The HighLoad Cup entities: their fields, as the contest's JSON has them, and as table rows.
declare(strict_types=1);

final class Schema
{
    /** Each entity's fields and types (int, string, gender), as the contest defines them. */
    public const FIELDS = [
        'users' => ['id' => 'int', 'email' => 'string', 'first_name' => 'string', 'last_name' => 'string', 'gender' => 'gender', 'birth_date' => 'int'],
        'locations' => ['id' => 'int', 'place' => 'string', 'country' => 'string', 'city' => 'string', 'distance' => 'int'],
        'visits' => ['id' => 'int', 'location' => 'int', 'user' => 'int', 'visited_at' => 'int', 'mark' => 'int'],
    ];

    /** The table row of an entity's fields (all but id; gender m/f as 1/2). */
    public static function toRow(string $entity, array $fields): array
    {
        unset($fields['id']);
        if (isset($fields['gender'])) {
            $fields['gender'] = $fields['gender'] === 'm' ? 1 : 2;
        }

        return $fields;
    }

    /** The entity of a table row, in the contest's field order. */
    public static function fromRow(string $entity, int $id, array $row): array
    {
        $out = ['id' => $id];
        foreach (self::FIELDS[$entity] as $name => $type) {
            if ($name !== 'id') {
                $out[$name] = $type === 'gender' ? ($row[$name] === 1 ? 'm' : 'f') : $row[$name];
            }
        }

        return $out;
    }

    /**
     * Checks a POST body: every field it has must be of its type and not null; with $new, every
     * field must be there. Returns the fields, or null for a 400.
     */
    public static function validate(string $entity, mixed $body, bool $new): ?array
    {
        if (!\is_array($body) || ($body !== [] && array_is_list($body))) {
            return null;
        }
        $fields = self::FIELDS[$entity];
        if (!$new && \array_key_exists('id', $body)) {
            return null;
        }
        foreach ($body as $name => $value) {
            $ok = match ($fields[$name] ?? null) {
                'int' => \is_int($value),
                'string' => \is_string($value),
                'gender' => $value === 'm' || $value === 'f',
                default => false,
            };
            if (!$ok) {
                return null;
            }
        }
        if ($new && \count($body) !== \count($fields)) {
            return null;
        }

        return $body;
    }
}
