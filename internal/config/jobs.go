package config

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Jobs configures background jobs (the jobs section; see docs/jobs.md).
type Jobs struct {
	// Pipelines are the queues jobs are pushed to, in the order of the file, each under its
	// name. Default none.
	Pipelines []Pipeline `yaml:"pipelines"`

	// Consumers are the PHP processes that run the jobs (jobs.consumers).
	Consumers Consumers `yaml:"consumers"`
}

// Pipeline is one queue of jobs.pipelines.
type Pipeline struct {
	// Name is the pipeline's name, the key under jobs.pipelines: letters, digits, _ and -.
	Name string

	// Driver keeps the queue: memory (in this server; lost when it stops), redis (a Redis
	// stream with a consumer group, shared by every server on that Redis) or nats (a JetStream
	// stream with a durable consumer, shared likewise). Default memory.
	Driver string `yaml:"driver"`

	// Redis locates the stream of the redis driver (jobs.pipelines.NAME.redis).
	Redis PipelineRedis `yaml:"redis"`

	// NATS locates the stream of the nats driver (jobs.pipelines.NAME.nats).
	NATS PipelineNATS `yaml:"nats"`

	// Retries is how many attempts follow a failed first one. Default 3.
	Retries int `yaml:"retries"`

	// Backoff is the delay before the first retry; each later retry waits twice the one
	// before. 0 retries at once. Default 1s.
	Backoff Duration `yaml:"backoff"`

	// Timeout bounds one attempt, from the moment a consumer takes it: past it the consumer is
	// killed and the attempt failed (consumers of several pipelines apply the longest of their
	// timeouts). A job received by a server that then died is taken over by another server
	// after Timeout and a 2s grace. Must be positive. Default 60s.
	Timeout Duration `yaml:"timeout"`

	// DeadLetter keeps a job that failed its last attempt in the dead letters, which
	// `peregrine jobs retry NAME` puts back in the queue; false drops it (and logs it).
	// Default true.
	DeadLetter bool `yaml:"dead_letter"`

	// Prefetch is how many jobs per consumer this server holds beyond those running,
	// received ahead to wait here for a free consumer. They stay this server's (their leases
	// renewed) and count no attempt until a consumer begins them; should the server die,
	// another runs them once their lease (timeout + 2s) expires. 0 receives a job only when a
	// consumer is free. At most 1000. Default 1.
	Prefetch int `yaml:"prefetch"`
}

// PipelineRedis locates a pipeline's Redis stream.
type PipelineRedis struct {
	// Address is Redis's host:port. Default 127.0.0.1:6379.
	Address string `yaml:"address"`
	// Stream is the stream's key; KEY:delayed and KEY:dead are used beside it. Empty means
	// peregrine:NAME. Default empty.
	Stream string `yaml:"stream"`
}

// PipelineNATS locates a pipeline's JetStream stream.
type PipelineNATS struct {
	// URL is the NATS server's. Default nats://127.0.0.1:4222.
	URL string `yaml:"url"`
	// Stream is the JetStream stream's name; STREAM_DELAYED and STREAM_DEAD are made beside it.
	// Empty means NAME in upper case. Default empty.
	Stream string `yaml:"stream"`
}

// ResolvedRedisStream returns Redis.Stream, or peregrine:NAME.
func (p Pipeline) ResolvedRedisStream() string {
	if p.Redis.Stream != "" {
		return p.Redis.Stream
	}
	return "peregrine:" + p.Name
}

// ResolvedNATSStream returns NATS.Stream, or the pipeline's name in upper case with - as _.
func (p Pipeline) ResolvedNATSStream() string {
	if p.NATS.Stream != "" {
		return p.NATS.Stream
	}
	return strings.ToUpper(strings.ReplaceAll(p.Name, "-", "_"))
}

// Consumers configures the PHP processes that run jobs: a pool of its own, supervised like the
// workers (restart after a crash, max_jobs, max_memory, the pipeline's timeout as exec
// timeout, draining on stop).
type Consumers struct {
	// Command starts one consumer, written as workers.command is; its script calls
	// Peregrine\Worker::create()->consume(). It runs under workers.runtime, in workers.dir.
	// Empty means this server runs no jobs (another server may). Default none.
	Command []string `yaml:"command"`

	// Count is the number of consumers; 0 means one per CPU. Default 0.
	Count int `yaml:"count"`

	// Pipelines lists the pipelines the consumers take jobs from; empty means all. Default all.
	Pipelines []string `yaml:"pipelines"`

	// Env holds variables added to the consumers' environment, over workers.env. Default none.
	Env map[string]string `yaml:"env"`

	// PHPIni holds php.ini settings for the consumers, over workers.php_ini. Default none.
	PHPIni map[string]string `yaml:"php_ini"`

	// MaxJobs replaces a consumer after this many jobs; 0 means never. Default 0.
	MaxJobs int `yaml:"max_jobs"`

	// MaxMemory replaces a consumer after a job once its RSS exceeds this size; 0 turns the
	// check off. Default 0.
	MaxMemory Size `yaml:"max_memory"`
}

// ResolvedCount returns Count, or one per CPU when it is 0.
func (c Consumers) ResolvedCount() int {
	return Workers{Count: c.Count}.ResolvedCount()
}

// KV configures the key-value stores (the kv section; see docs/jobs.md).
type KV struct {
	// Stores are the stores Peregrine\KV::store(NAME) opens, in the order of the file, each
	// under its name. Default none.
	Stores []Store `yaml:"stores"`
}

// Store is one store of kv.stores.
type Store struct {
	// Name is the store's name, the key under kv.stores.
	Name string
	// Driver is memory (in this server, with expiry) or redis (shared by every server on that
	// Redis; its keys start with peregrine:kv:NAME:). Default memory.
	Driver string `yaml:"driver"`
	// Address is Redis's host:port for the redis driver. Default 127.0.0.1:6379.
	Address string `yaml:"address"`
}

// Drivers of pipelines and stores.
var (
	pipelineDrivers = []string{"memory", "redis", "nats"}
	storeDrivers    = []string{"memory", "redis"}
	jobsName        = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)
)

func defaultPipeline(name string) Pipeline {
	return Pipeline{Name: name, Driver: "memory", Retries: 3, Backoff: Duration(time.Second),
		Timeout: Duration(60 * time.Second), DeadLetter: true, Prefetch: 1,
		Redis: PipelineRedis{Address: "127.0.0.1:6379"}, NATS: PipelineNATS{URL: "nats://127.0.0.1:4222"}}
}

func pipelineKeys(p *Pipeline) []key {
	return []key{
		wordKey("driver", &p.Driver),
		groupKey("redis", stringKey("address", &p.Redis.Address), stringKey("stream", &p.Redis.Stream)),
		groupKey("nats", stringKey("url", &p.NATS.URL), stringKey("stream", &p.NATS.Stream)),
		intKey("retries", &p.Retries),
		durationKey("backoff", &p.Backoff),
		durationKey("timeout", &p.Timeout),
		boolKey("dead_letter", &p.DeadLetter),
		intKey("prefetch", &p.Prefetch),
	}
}

func consumersKeys(c *Consumers) []key {
	return []key{
		initKey("command", &c.Command),
		intKey("count", &c.Count),
		listKey("pipelines", &c.Pipelines),
		mapKey("env", &c.Env),
		mapKey("php_ini", &c.PHPIni),
		intKey("max_jobs", &c.MaxJobs),
		sizeKey("max_memory", &c.MaxMemory),
	}
}

// namedKey reads a mapping of names to groups of keys into a list, in file order; fresh makes
// an element with its defaults and keys binds its fields.
func namedKey[T any](name string, p *[]T, fresh func(name string) T, keys func(*T) []key, nameOf func(T) string) key {
	return key{name,
		func(d *decoder, v *yaml.Node, path string) {
			var list []T
			d.mapping(v, path, nil, func(n string, v *yaml.Node) {
				e := fresh(n)
				groupKey(n, keys(&e)...).decode(d, v, path+"."+n)
				list = append(list, e)
			})
			*p = list
		},
		func() *yaml.Node {
			m := &yaml.Node{Kind: yaml.MappingNode}
			for i := range *p {
				e := &(*p)[i]
				m.Content = append(m.Content, keyNode(nameOf(*e)), groupKey("", keys(e)...).encode())
			}
			if len(*p) == 0 {
				m.Style = yaml.FlowStyle
			}
			return m
		},
	}
}

func pipelinesKey(name string, p *[]Pipeline) key {
	return namedKey(name, p, defaultPipeline, pipelineKeys, func(p Pipeline) string { return p.Name })
}

func storesKey(name string, p *[]Store) key {
	return namedKey(name, p, func(n string) Store { return Store{Name: n, Driver: "memory", Address: "127.0.0.1:6379"} },
		func(s *Store) []key { return []key{wordKey("driver", &s.Driver), stringKey("address", &s.Address)} },
		func(s Store) string { return s.Name })
}

// Pipeline returns the pipeline called name.
func (j Jobs) Pipeline(name string) (Pipeline, bool) {
	i := slices.IndexFunc(j.Pipelines, func(p Pipeline) bool { return p.Name == name })
	if i < 0 {
		return Pipeline{}, false
	}
	return j.Pipelines[i], true
}

// Consumed returns the pipelines the consumers take jobs from: none without a command.
func (j Jobs) Consumed() []Pipeline {
	if len(j.Consumers.Command) == 0 {
		return nil
	}
	if len(j.Consumers.Pipelines) == 0 {
		return j.Pipelines
	}
	var out []Pipeline
	for _, n := range j.Consumers.Pipelines {
		if p, ok := j.Pipeline(n); ok {
			out = append(out, p)
		}
	}
	return out
}

// validateJobs checks the jobs and kv sections.
func (c *Config) validateJobs() []*Error {
	var errs []*Error
	add := func(key, format string, args ...any) {
		errs = append(errs, &Error{Key: key, Msg: fmt.Sprintf(format, args...)})
	}
	for i, p := range c.Jobs.Pipelines {
		k := "jobs.pipelines." + p.Name
		if !jobsName.MatchString(p.Name) {
			add(k, "a pipeline name is letters, digits, _ and -, at most 64 bytes")
		} else if slices.ContainsFunc(c.Jobs.Pipelines[:i], func(o Pipeline) bool { return o.Name == p.Name }) {
			add(k, "defined twice")
		}
		if !slices.Contains(pipelineDrivers, p.Driver) {
			add(k+".driver", "want one of %s, got %q", strings.Join(pipelineDrivers, ", "), p.Driver)
		}
		switch p.Driver {
		case "redis":
			if msg := checkAddress(p.Redis.Address); msg != "" {
				add(k+".redis.address", "%s", msg)
			}
		case "nats":
			if !strings.HasPrefix(p.NATS.URL, "nats://") && !strings.HasPrefix(p.NATS.URL, "tls://") {
				add(k+".nats.url", "want nats://host:port, got %q", p.NATS.URL)
			}
			if s := p.ResolvedNATSStream(); !jobsName.MatchString(s) {
				add(k+".nats.stream", "a JetStream stream name is letters, digits, _ and -, got %q", s)
			}
		}
		if p.Retries < 0 {
			add(k+".retries", "cannot be negative, got %d", p.Retries)
		}
		if p.Backoff < 0 {
			add(k+".backoff", "cannot be negative, got %s", p.Backoff)
		}
		if p.Timeout <= 0 {
			add(k+".timeout", "must be positive, got %s", p.Timeout)
		}
		if p.Prefetch < 0 || p.Prefetch > 1000 {
			add(k+".prefetch", "want 0 to 1000 jobs per consumer, got %d", p.Prefetch)
		}
	}
	cs := c.Jobs.Consumers
	for i, n := range cs.Pipelines {
		if _, ok := c.Jobs.Pipeline(n); !ok {
			add("jobs.consumers.pipelines["+strconv.Itoa(i)+"]", "%q is not a pipeline of jobs.pipelines", n)
		}
	}
	if len(cs.Command) > 0 && len(c.Jobs.Pipelines) == 0 {
		add("jobs.consumers.command", "set without jobs.pipelines: there is no job to consume")
	}
	if cs.Count < 0 {
		add("jobs.consumers.count", "cannot be negative, got %d (0 means one per CPU)", cs.Count)
	}
	if cs.MaxJobs < 0 {
		add("jobs.consumers.max_jobs", "cannot be negative, got %d (0 means never)", cs.MaxJobs)
	}
	if cs.MaxMemory < 0 {
		add("jobs.consumers.max_memory", "cannot be negative (0 turns the check off)")
	}
	for i, s := range c.KV.Stores {
		k := "kv.stores." + s.Name
		if !jobsName.MatchString(s.Name) {
			add(k, "a store name is letters, digits, _ and -, at most 64 bytes")
		} else if slices.ContainsFunc(c.KV.Stores[:i], func(o Store) bool { return o.Name == s.Name }) {
			add(k, "defined twice")
		}
		if !slices.Contains(storeDrivers, s.Driver) {
			add(k+".driver", "want one of %s, got %q", strings.Join(storeDrivers, ", "), s.Driver)
		}
		if s.Driver == "redis" {
			if msg := checkAddress(s.Address); msg != "" {
				add(k+".address", "%s", msg)
			}
		}
	}
	return errs
}
