<?php

declare(strict_types=1);

namespace Peregrine\Internal;

use Peregrine\Http\UploadedFile;

/**
 * Uploads arranges the uploaded files of a request by their form field names, following PHP's
 * rules for names: "avatar", "docs[]", "a[b][c]".
 *
 * @internal
 */
final class Uploads
{
    /** The UploadedFile property behind each $_FILES key, in PHP's order. */
    private const PHP_KEYS = ['name' => 'name', 'full_path' => 'name', 'type' => 'type', 'tmp_name' => 'tmpPath', 'error' => 'error', 'size' => 'size'];

    /**
     * Returns the files in the shape of their field names: "docs[]" gives
     * ['docs' => [UploadedFile, ...]], "a[b]" gives ['a' => ['b' => UploadedFile]].
     *
     * @param list<array{string, string, string, int, int, string}> $uploads field, client name,
     *                                                                        client type, size, error, temporary path
     *
     * @return array<string, mixed>
     */
    public static function tree(array $uploads): array
    {
        // parse_str() of "field=index" pairs nests exactly the way PHP nests form fields; the
        // indexes are then replaced by the files.
        $tree = self::indexTree($uploads);
        array_walk_recursive($tree, static function (mixed &$leaf) use ($uploads): void {
            [, $name, $type, $size, $error, $tmpPath] = $uploads[(int) $leaf];
            $leaf = new UploadedFile($name, $type, $size, $error, $tmpPath);
        });

        return $tree;
    }

    /**
     * Returns PHP's $_FILES layout of a file tree made by tree(): nested fields invert the
     * attributes, "docs[]" gives ['docs' => ['name' => [0 => ...], 'type' => [0 => ...], ...]].
     *
     * @param array<string, mixed> $tree
     *
     * @return array<string, array<string, mixed>>
     */
    public static function phpFiles(array $tree): array
    {
        $files = [];
        foreach ($tree as $field => $node) {
            foreach (self::PHP_KEYS as $key => $property) {
                $files[$field][$key] = self::attribute($node, $property);
            }
        }

        return $files;
    }

    /**
     * @param list<array{string, string, string, int, int, string}> $uploads
     *
     * @return array<string, mixed> leaves are indexes into $uploads, as strings
     */
    private static function indexTree(array $uploads): array
    {
        $query = '';
        foreach ($uploads as $index => $upload) {
            $query .= '&' . strtr(rawurlencode($upload[0]), ['%5B' => '[', '%5D' => ']']) . '=' . $index;
        }
        parse_str($query, $tree);

        return $tree;
    }

    private static function attribute(mixed $node, string $property): mixed
    {
        if ($node instanceof UploadedFile) {
            return $node->$property;
        }
        $values = [];
        foreach (\is_array($node) ? $node : [] as $key => $child) {
            $values[$key] = self::attribute($child, $property);
        }

        return $values;
    }
}
