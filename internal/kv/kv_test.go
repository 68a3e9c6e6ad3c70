package kv

import (
	"context"
	"crypto/rand"
	"errors"
	"net"
	"os/exec"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func stores(t *testing.T) map[string]Store {
	m := NewMemory()
	t.Cleanup(func() { _ = m.Close() })
	out := map[string]Store{"memory": m}
	if ensureRedis(t) {
		// Of this run alone: the Redis is the machine's, shared with other runs of the test.
		prefix := "peregrine-test:kv:" + t.Name() + ":" + rand.Text()[:12] + ":"
		r, err := NewRedis(context.Background(), "127.0.0.1:6379", prefix)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
			defer rdb.Close()
			keys, _ := rdb.Keys(context.Background(), prefix+"*").Result()
			if len(keys) > 0 {
				rdb.Del(context.Background(), keys...)
			}
			_ = r.Close()
		})
		out["redis"] = r
	}
	return out
}

// ensureRedis makes sure Redis listens on 127.0.0.1:6379, starting it as the machine's notes
// say if not; it reports false (and the redis store goes untested) only when Redis is not
// installed.
func ensureRedis(t *testing.T) bool {
	up := func() bool {
		c, err := net.DialTimeout("tcp", "127.0.0.1:6379", time.Second)
		if err == nil {
			_ = c.Close()
		}
		return err == nil
	}
	if up() {
		return true
	}
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Log("Redis is not installed: the redis store is not tested")
		return false
	}
	if out, err := exec.Command("redis-server", "--daemonize", "yes", "--bind", "127.0.0.1", "-::1", "--port", "6379",
		"--save", "", "--appendonly", "no").CombinedOutput(); err != nil {
		t.Fatalf("start redis-server: %v\n%s", err, out)
	}
	for deadline := time.Now().Add(10 * time.Second); !up(); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("redis-server did not come up within 10s")
		}
	}
	return true
}

func TestStores(t *testing.T) {
	ctx := context.Background()
	for name, s := range stores(t) {
		t.Run(name, func(t *testing.T) {
			if _, ok, err := s.Get(ctx, "a"); ok || err != nil {
				t.Fatalf("Get of a missing key: %v %v", ok, err)
			}
			if err := s.Set(ctx, "a", "one", 0); err != nil {
				t.Fatal(err)
			}
			if v, ok, err := s.Get(ctx, "a"); v != "one" || !ok || err != nil {
				t.Fatalf("Get = %q %v %v", v, ok, err)
			}
			if ok, _ := s.Has(ctx, "a"); !ok {
				t.Error("Has = false after Set")
			}
			if err := s.Delete(ctx, "a"); err != nil {
				t.Fatal(err)
			}
			if ok, _ := s.Has(ctx, "a"); ok {
				t.Error("Has = true after Delete")
			}
			for want := int64(1); want <= 3; want++ {
				if n, err := s.Incr(ctx, "n", 1); n != want || err != nil {
					t.Fatalf("Incr = %d %v, want %d", n, err, want)
				}
			}
			if n, _ := s.Incr(ctx, "n", -5); n != -2 {
				t.Errorf("Incr by -5 = %d", n)
			}
			_ = s.Set(ctx, "s", "text", 0)
			if _, err := s.Incr(ctx, "s", 1); !errors.Is(err, ErrNotInteger) {
				t.Errorf("Incr of text: %v", err)
			}
			if err := s.Set(ctx, "big", string(make([]byte, MaxValue+1)), 0); !errors.Is(err, ErrTooLarge) {
				t.Errorf("Set of an oversized value: %v", err)
			}

			// Expiry: a key set for 2s (which a loaded machine does not spend between two
			// calls) is there at once and gone after.
			const ttl = 2 * time.Second
			if err := s.Set(ctx, "t", "x", ttl); err != nil {
				t.Fatal(err)
			}
			if ok, _ := s.Has(ctx, "t"); !ok {
				t.Error("a key with a ttl is missing at once")
			}
			deadline := time.Now().Add(30 * time.Second)
			for {
				if ok, _ := s.Has(ctx, "t"); !ok {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("a key with a %v ttl is still there after 30s", ttl)
				}
				time.Sleep(50 * time.Millisecond)
			}
		})
	}
}
