// Package kv owns the key-value stores of kv.stores: memory, in this server with expiry, and
// redis, shared by every server on the same Redis. Values are strings (the PHP library stores
// JSON); Incr treats a value as a decimal integer. It knows nothing of PHP or of how a store is
// reached: the daemon serves the stores to the workers.
package kv

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Errors returned by the stores.
var (
	ErrNotInteger = errors.New("kv: the value is not an integer")
	ErrTooLarge   = errors.New("kv: value too large")
)

// MaxValue is the largest value a store takes, in bytes.
const MaxValue = 1 << 20

// Store is one key-value store. Its methods are safe for concurrent use. A ttl of 0 means no
// expiry.
type Store interface {
	Get(ctx context.Context, key string) (value string, ok bool, err error)
	Set(ctx context.Context, key, value string, ttl time.Duration) error
	Has(ctx context.Context, key string) (bool, error)
	Delete(ctx context.Context, key string) error
	// Incr adds by to the integer at key (0 when absent) and returns the sum; the key keeps its
	// expiry.
	Incr(ctx context.Context, key string, by int64) (int64, error)
	Close() error
}

// Memory is a store in this server's memory. Expired keys are removed when read and by a
// sweep every minute.
type Memory struct {
	mu    sync.Mutex
	items map[string]item
	stop  chan struct{}
	once  sync.Once
}

type item struct {
	value   string
	expires time.Time // zero: never
}

func (i item) expired(now time.Time) bool { return !i.expires.IsZero() && !now.Before(i.expires) }

var _ Store = (*Memory)(nil)

// NewMemory returns an empty memory store.
func NewMemory() *Memory {
	m := &Memory{items: map[string]item{}, stop: make(chan struct{})}
	go m.sweep(time.Minute)
	return m
}

func (m *Memory) sweep(every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case now := <-t.C:
			m.mu.Lock()
			for k, it := range m.items {
				if it.expired(now) {
					delete(m.items, k)
				}
			}
			m.mu.Unlock()
		}
	}
}

func (m *Memory) getLocked(key string) (item, bool) {
	it, ok := m.items[key]
	if ok && it.expired(time.Now()) {
		delete(m.items, key)
		return item{}, false
	}
	return it, ok
}

// Get implements Store.
func (m *Memory) Get(_ context.Context, key string) (string, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	it, ok := m.getLocked(key)
	return it.value, ok, nil
}

// Set implements Store.
func (m *Memory) Set(_ context.Context, key, value string, ttl time.Duration) error {
	if len(value) > MaxValue {
		return ErrTooLarge
	}
	it := item{value: value}
	if ttl > 0 {
		it.expires = time.Now().Add(ttl)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.items[key] = it
	return nil
}

// Has implements Store.
func (m *Memory) Has(_ context.Context, key string) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.getLocked(key)
	return ok, nil
}

// Delete implements Store.
func (m *Memory) Delete(_ context.Context, key string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.items, key)
	return nil
}

// Incr implements Store.
func (m *Memory) Incr(_ context.Context, key string, by int64) (int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	it, _ := m.getLocked(key)
	var n int64
	if it.value != "" {
		var err error
		if n, err = strconv.ParseInt(it.value, 10, 64); err != nil {
			return 0, ErrNotInteger
		}
	}
	n += by
	it.value = strconv.FormatInt(n, 10)
	m.items[key] = it
	return n, nil
}

// Close implements Store.
func (m *Memory) Close() error {
	m.once.Do(func() { close(m.stop) })
	return nil
}

// Redis is a store on Redis: each key is PREFIX+key, with Redis's own expiry.
type Redis struct {
	rdb    *redis.Client
	prefix string
}

var _ Store = (*Redis)(nil)

// NewRedis returns a store on the Redis at address whose keys start with prefix. It checks that
// Redis answers.
func NewRedis(ctx context.Context, address, prefix string) (*Redis, error) {
	rdb := redis.NewClient(&redis.Options{Addr: address})
	if err := rdb.Ping(ctx).Err(); err != nil {
		_ = rdb.Close()
		return nil, err
	}
	return &Redis{rdb: rdb, prefix: prefix}, nil
}

// Get implements Store.
func (r *Redis) Get(ctx context.Context, key string) (string, bool, error) {
	v, err := r.rdb.Get(ctx, r.prefix+key).Result()
	if errors.Is(err, redis.Nil) {
		return "", false, nil
	}
	return v, err == nil, err
}

// Set implements Store.
func (r *Redis) Set(ctx context.Context, key, value string, ttl time.Duration) error {
	if len(value) > MaxValue {
		return ErrTooLarge
	}
	return r.rdb.Set(ctx, r.prefix+key, value, ttl).Err()
}

// Has implements Store.
func (r *Redis) Has(ctx context.Context, key string) (bool, error) {
	n, err := r.rdb.Exists(ctx, r.prefix+key).Result()
	return n == 1, err
}

// Delete implements Store.
func (r *Redis) Delete(ctx context.Context, key string) error {
	return r.rdb.Del(ctx, r.prefix+key).Err()
}

// Incr implements Store.
func (r *Redis) Incr(ctx context.Context, key string, by int64) (int64, error) {
	n, err := r.rdb.IncrBy(ctx, r.prefix+key, by).Result()
	if err != nil && err.Error() == "ERR value is not an integer or out of range" {
		return 0, ErrNotInteger
	}
	return n, err
}

// Close implements Store.
func (r *Redis) Close() error { return r.rdb.Close() }
