<?php

declare(strict_types=1);

namespace Peregrine;

use Peregrine\Internal\CallSocket;

/**
 * KV is one key-value store of the server this worker runs under (kv.stores, docs/jobs.md):
 * memory (the server's, with expiry) or redis (shared by every server on that Redis). Values
 * are stored as JSON: strings, numbers, booleans, null and arrays come back as they went in,
 * objects as arrays. Every call goes through the server.
 *
 * @throws \RuntimeException from every method when the store does not exist or fails
 */
final class KV
{
    private function __construct(private readonly string $name)
    {
    }

    /** The store called $name; it is looked up by the first call. */
    public static function store(string $name = 'default'): self
    {
        return new self($name);
    }

    /** The value at $key, or $default when there is none (or it expired). */
    public function get(string $key, mixed $default = null): mixed
    {
        $answer = $this->call('kv.get', $key);
        if (($answer['found'] ?? false) !== true) {
            return $default;
        }

        return json_decode((string) ($answer['value'] ?? 'null'), true, 512, JSON_THROW_ON_ERROR);
    }

    /**
     * Stores $value at $key, for $ttl seconds when given (null or 0: no expiry).
     *
     * @throws \JsonException if $value cannot be encoded
     */
    public function set(string $key, mixed $value, int|float|null $ttl = null): void
    {
        $extra = ['value' => json_encode($value, JSON_THROW_ON_ERROR | JSON_UNESCAPED_SLASHES | JSON_UNESCAPED_UNICODE | JSON_PRESERVE_ZERO_FRACTION)];
        if ($ttl !== null && $ttl > 0) {
            $extra['ttl'] = $ttl;
        }
        $this->call('kv.set', $key, $extra);
    }

    public function has(string $key): bool
    {
        return ($this->call('kv.has', $key)['found'] ?? false) === true;
    }

    public function delete(string $key): void
    {
        $this->call('kv.delete', $key);
    }

    /**
     * Adds $by to the integer at $key (0 when there is none) and returns the sum, atomically
     * across every worker and, with redis, every server.
     *
     * @throws \RuntimeException if the value is not an integer
     */
    public function incr(string $key, int $by = 1): int
    {
        return (int) ($this->call('kv.incr', $key, ['by' => $by])['n'] ?? 0);
    }

    /**
     * @param array<string, mixed> $extra
     *
     * @return array<string, mixed>
     */
    private function call(string $op, string $key, array $extra = []): array
    {
        return CallSocket::call(['op' => $op, 'store' => $this->name, 'key' => $key] + $extra);
    }
}
