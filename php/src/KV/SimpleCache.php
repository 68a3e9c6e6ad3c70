<?php

declare(strict_types=1);

namespace Peregrine\KV;

use Peregrine\KV;
use Psr\SimpleCache\CacheInterface;

/**
 * SimpleCache is a PSR-16 cache over a Peregrine\KV store, for libraries that take a
 * Psr\SimpleCache\CacheInterface. The PSR interfaces must be loadable: Composer's
 * psr/simple-cache, or Debian's php-psr-simple-cache (require
 * '/usr/share/php/Psr/SimpleCache/autoload.php'). Values are stored as JSON, as KV stores them:
 * objects come back as arrays.
 *
 * clear() is not supported (a store may be shared by other applications on the same Redis) and
 * returns false.
 */
final class SimpleCache implements CacheInterface
{
    private readonly KV $store;

    public function __construct(KV|string $store = 'default')
    {
        $this->store = \is_string($store) ? KV::store($store) : $store;
    }

    public function get($key, $default = null): mixed
    {
        return $this->store->get(self::key($key), $default);
    }

    public function set($key, $value, $ttl = null): bool
    {
        $seconds = self::ttl($ttl);
        if ($seconds !== null && $seconds <= 0) {
            return $this->delete($key); // PSR-16: a past expiry removes the item
        }
        $this->store->set(self::key($key), $value, $seconds);

        return true;
    }

    public function delete($key): bool
    {
        $this->store->delete(self::key($key));

        return true;
    }

    public function clear(): bool
    {
        return false;
    }

    /** @return iterable<string, mixed> */
    public function getMultiple($keys, $default = null): iterable
    {
        $out = [];
        foreach (self::keys($keys) as $key) {
            $out[$key] = $this->get($key, $default);
        }

        return $out;
    }

    public function setMultiple($values, $ttl = null): bool
    {
        if (!is_iterable($values)) {
            throw new InvalidKey('setMultiple() takes an iterable, ' . get_debug_type($values) . ' given');
        }
        $ok = true;
        foreach ($values as $key => $value) {
            $ok = $this->set(\is_int($key) ? (string) $key : $key, $value, $ttl) && $ok;
        }

        return $ok;
    }

    public function deleteMultiple($keys): bool
    {
        foreach (self::keys($keys) as $key) {
            $this->delete($key);
        }

        return true;
    }

    public function has($key): bool
    {
        return $this->store->has(self::key($key));
    }

    /** PSR-16's keys: a non-empty string without {}()/\@: */
    private static function key(mixed $key): string
    {
        if (!\is_string($key) || $key === '' || strpbrk($key, '{}()/\\@:') !== false) {
            throw new InvalidKey('A cache key must be a non-empty string without {}()/\\@:, got ' . var_export($key, true));
        }

        return $key;
    }

    /** @return list<string> */
    private static function keys(mixed $keys): array
    {
        if (!is_iterable($keys)) {
            throw new InvalidKey('The keys must be iterable, ' . get_debug_type($keys) . ' given');
        }
        $out = [];
        foreach ($keys as $key) {
            $out[] = self::key($key);
        }

        return $out;
    }

    private static function ttl(mixed $ttl): ?int
    {
        if ($ttl === null) {
            return null;
        }
        if ($ttl instanceof \DateInterval) {
            $now = new \DateTimeImmutable();

            return $now->add($ttl)->getTimestamp() - $now->getTimestamp();
        }
        if (\is_int($ttl)) {
            return $ttl;
        }
        throw new InvalidKey('A ttl is null, an int or a DateInterval, ' . get_debug_type($ttl) . ' given');
    }
}
