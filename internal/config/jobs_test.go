package config

import (
	"strings"
	"testing"
	"time"
)

func TestJobsDefaults(t *testing.T) {
	c := mustParse(t, "jobs:\n  pipelines:\n    emails:\n    q2: { driver: redis }\n  consumers: { command: php c.php }\nkv:\n  stores:\n    default:\n", nil)
	if len(c.Jobs.Pipelines) != 2 {
		t.Fatalf("pipelines %+v", c.Jobs.Pipelines)
	}
	p := c.Jobs.Pipelines[0]
	if p.Name != "emails" || p.Driver != "memory" || p.Retries != 3 || p.Backoff != Duration(time.Second) ||
		p.Timeout != Duration(time.Minute) || !p.DeadLetter || p.ResolvedRedisStream() != "peregrine:emails" ||
		p.ResolvedNATSStream() != "EMAILS" {
		t.Errorf("defaults of a pipeline: %+v", p)
	}
	if q := c.Jobs.Pipelines[1]; q.Driver != "redis" || q.Redis.Address != "127.0.0.1:6379" {
		t.Errorf("second pipeline %+v", q)
	}
	if got := c.Jobs.Consumed(); len(got) != 2 {
		t.Errorf("consumed without a list: %v", got)
	}
	if s := c.KV.Stores; len(s) != 1 || s[0].Name != "default" || s[0].Driver != "memory" {
		t.Errorf("stores %+v", s)
	}
}

func TestJobsErrors(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"jobs:\n  pipelines:\n    a:\n      driver: kafka\n", `:4: jobs.pipelines.a.driver: want one of memory, redis, nats, got "kafka"`},
		{"jobs:\n  pipelines:\n    a:\n      drivr: memory\n", `:4: jobs.pipelines.a.drivr: unknown key`},
		{"jobs:\n  pipelines:\n    a.b: {}\n", `jobs.pipelines.a.b: a pipeline name is letters`},
		{"jobs:\n  pipelines:\n    a: { timeout: 0s }\n", `jobs.pipelines.a.timeout: must be positive`},
		{"jobs:\n  pipelines:\n    a: { retries: -1 }\n", `jobs.pipelines.a.retries: cannot be negative`},
		{"jobs:\n  pipelines:\n    a: { prefetch: -1 }\n", `jobs.pipelines.a.prefetch: want 0 to 1000 jobs per consumer, got -1`},
		{"jobs:\n  pipelines:\n    a: { prefetch: 1001 }\n", `jobs.pipelines.a.prefetch: want 0 to 1000 jobs per consumer, got 1001`},
		{"jobs:\n  pipelines:\n    a: { driver: nats, nats: { url: \"http://x\" } }\n", `jobs.pipelines.a.nats.url: want nats://`},
		{"jobs:\n  pipelines:\n    a: { driver: redis, redis: { address: nope } }\n", `jobs.pipelines.a.redis.address`},
		{"jobs:\n  pipelines:\n    a: {}\n  consumers:\n    pipelines: [b]\n", `jobs.consumers.pipelines[0]: "b" is not a pipeline`},
		{"jobs:\n  consumers:\n    command: php c.php\n", `jobs.consumers.command: set without jobs.pipelines`},
		{"kv:\n  stores:\n    s: { driver: memcached }\n", `kv.stores.s.driver: want one of memory, redis`},
	} {
		_, err := parse("peregrine.yaml", []byte(tc.yaml), env(nil))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want %q", tc.yaml, err, tc.want)
		}
	}
}
