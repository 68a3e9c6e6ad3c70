package config

import (
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// The schema binds every key of the file to its field in one place: Parse reads the keys through
// it, EffectiveYAML writes them, and the unknown-key hints draw their suggestions from it. Its
// order is the order of the documented file.

// A section is one top-level mapping of the file.
type section struct {
	name string
	keys []key
}

// A key is one leaf of the file, bound to a field of a particular Config, or a group of keys
// such as http.tls (groupKey).
type key struct {
	name string
	// decode reads v into the field; path is the key's dotted name for errors.
	decode func(d *decoder, v *yaml.Node, path string)
	// encode returns the field as a YAML node, or nil to leave the key out.
	encode func() *yaml.Node
}

// schema returns the sections and keys of the file bound to the fields of c.
func schema(c *Config) []section {
	h, w := &c.HTTP, &c.Workers
	return []section{
		{"http", []key{
			stringKey("address", &h.Address),
			sizeKey("max_body_size", &h.MaxBodySize),
			durationKey("read_header_timeout", &h.ReadHeaderTimeout),
			durationKey("body_timeout", &h.BodyTimeout),
			durationKey("idle_timeout", &h.IdleTimeout),
			intKey("max_header_count", &h.MaxHeaderCount),
			sizeKey("max_header_line", &h.MaxHeaderLine),
			intKey("max_cookies", &h.MaxCookies),
			intKey("max_input_vars", &h.MaxInputVars),
			intKey("max_connections", &h.MaxConnections),
			stringKey("server_name", &h.ServerName),
			durationKey("write_timeout", &h.WriteTimeout),
			stringKey("root", &h.Root),
			stringKey("index", &h.Index),
			listKey("sendfile_dirs", &h.SendfileDirs),
			listKey("compression", &h.Compression),
			listKey("trusted_proxies", &h.TrustedProxies),
			groupKey("tls",
				stringKey("cert", &h.TLS.Cert),
				stringKey("key", &h.TLS.Key),
				stringKey("redirect_address", &h.TLS.RedirectAddress),
				groupKey("acme",
					stringKey("email", &h.TLS.ACME.Email),
					listKey("domains", &h.TLS.ACME.Domains),
					stringKey("ca", &h.TLS.ACME.CA),
					stringKey("ca_root", &h.TLS.ACME.CARoot),
					stringKey("storage", &h.TLS.ACME.Storage),
				),
			),
			boolKey("direct", &h.Direct),
		}},
		{"workers", []key{
			commandKey("command", &w.Command),
			wordKey("runtime", &w.Runtime),
			boolKey("fork", &w.Fork),
			stringKey("dir", &w.Dir),
			intKey("count", &w.Count),
			intKey("concurrency", &w.Concurrency),
			mapKey("env", &w.Env),
			boolKey("clear_env", &w.ClearEnv),
			boolKey("debug_leaks", &w.DebugLeaks),
			mapKey("php_ini", &w.PHPIni),
			intKey("max_jobs", &w.MaxJobs),
			sizeKey("max_memory", &w.MaxMemory),
			durationKey("exec_timeout", &w.ExecTimeout),
			durationKey("allocate_timeout", &w.AllocateTimeout),
			intKey("max_queue", &w.MaxQueue),
			durationKey("stop_timeout", &w.StopTimeout),
			durationKey("boot_timeout", &w.BootTimeout),
			listKey("watch", &w.Watch),
		}},
		{"admin", []key{
			stringKey("address", &c.Admin.Address),
			stringKey("token", &c.Admin.Token),
		}},
		{"log", []key{
			wordKey("level", &c.Log.Level),
			wordKey("format", &c.Log.Format),
			boolKey("access", &c.Log.Access),
			stringKey("access_file", &c.Log.AccessFile),
		}},
		{"tables", []key{
			initKey("init", &c.Tables.Init),
			tablesDefineKey("define", &c.Tables.Define),
		}},
		{"jobs", []key{
			pipelinesKey("pipelines", &c.Jobs.Pipelines),
			groupKey("consumers", consumersKeys(&c.Jobs.Consumers)...),
		}},
		{"kv", []key{
			storesKey("stores", &c.KV.Stores),
		}},
		{"websocket", websocketKeys(&c.WebSocket)},
	}
}

// names returns the names of the sections and, by section or dotted group (http.tls), of their
// keys. A group's keys are read from its encoded form, which lists them all.
func names() (sections []string, keys map[string][]string) {
	keys = map[string][]string{}
	var group func(path string, m *yaml.Node)
	group = func(path string, m *yaml.Node) {
		for i := 0; i+1 < len(m.Content); i += 2 {
			name := m.Content[i].Value
			keys[path] = append(keys[path], name)
			if v := m.Content[i+1]; v.Kind == yaml.MappingNode && len(v.Content) > 0 {
				group(path+"."+name, v)
			}
		}
	}
	for _, s := range schema(&Config{}) {
		sections = append(sections, s.name)
		for _, k := range s.keys {
			keys[s.name] = append(keys[s.name], k.name)
			if v := k.encode(); v != nil && v.Kind == yaml.MappingNode && len(v.Content) > 0 {
				group(s.name+"."+k.name, v)
			}
		}
	}
	return sections, keys
}

// groupKey is a mapping of keys nested in a section, such as http.tls; a null value leaves
// every key at its default.
func groupKey(name string, keys ...key) key {
	return key{name,
		func(d *decoder, v *yaml.Node, path string) {
			known := make([]string, len(keys))
			for i, k := range keys {
				known[i] = k.name
			}
			d.mapping(v, path, known, func(kname string, v *yaml.Node) {
				keys[slices.Index(known, kname)].decode(d, v, path+"."+kname)
			})
		},
		func() *yaml.Node {
			m := &yaml.Node{Kind: yaml.MappingNode}
			for _, k := range keys {
				if v := k.encode(); v != nil {
					m.Content = append(m.Content, keyNode(k.name), v)
				}
			}
			return m
		},
	}
}

func stringKey(name string, p *string) key {
	return key{name,
		func(d *decoder, v *yaml.Node, path string) {
			if s, ok := d.string(v, path); ok {
				*p = s
			}
		},
		func() *yaml.Node { return stringNode(*p) },
	}
}

// wordKey is a string key whose value is read case-insensitively, stored in lower case.
func wordKey(name string, p *string) key {
	k := stringKey(name, p)
	k.decode = func(d *decoder, v *yaml.Node, path string) {
		if s, ok := d.string(v, path); ok {
			*p = strings.ToLower(s)
		}
	}
	return k
}

func intKey(name string, p *int) key {
	return key{name,
		func(d *decoder, v *yaml.Node, path string) {
			if n, ok := d.int(v, path); ok {
				*p = n
			}
		},
		func() *yaml.Node { return plainNode(strconv.Itoa(*p)) },
	}
}

func boolKey(name string, p *bool) key {
	return key{name,
		func(d *decoder, v *yaml.Node, path string) {
			if b, ok := d.bool(v, path); ok {
				*p = b
			}
		},
		func() *yaml.Node { return plainNode(strconv.FormatBool(*p)) },
	}
}

func sizeKey(name string, p *Size) key {
	return key{name,
		func(d *decoder, v *yaml.Node, path string) {
			if s, ok := d.scalar(v, path, "a size like 512, 64KiB or 8MiB"); ok {
				n, err := ParseSize(s)
				if err != nil {
					d.errorf(v, path, "%v", err)
					return
				}
				*p = n
			}
		},
		func() *yaml.Node { return plainNode(p.String()) },
	}
}

func durationKey(name string, p *Duration) key {
	return key{name,
		func(d *decoder, v *yaml.Node, path string) {
			if s, ok := d.scalar(v, path, "a duration like 500ms or 10s"); ok {
				t, err := ParseDuration(s)
				if err != nil {
					d.errorf(v, path, "%v", err)
					return
				}
				*p = t
			}
		},
		func() *yaml.Node { return plainNode(p.String()) },
	}
}

func listKey(name string, p *[]string) key {
	return key{name,
		func(d *decoder, v *yaml.Node, path string) {
			if list, ok := d.list(v, path); ok {
				*p = list
			}
		},
		func() *yaml.Node { return listNode(*p) },
	}
}

// commandKey reads a string split with SplitCommand or a list taken as is. A command the file
// sets must not be empty; one it leaves out is left to the command line and Validate.
func commandKey(name string, p *[]string) key {
	return key{name,
		func(d *decoder, v *yaml.Node, path string) {
			var args []string
			if r := resolve(v); r.Kind == yaml.ScalarNode && !isNull(r) {
				s, ok := d.scalar(r, path, "")
				if !ok {
					return
				}
				var err error
				if args, err = SplitCommand(s); err != nil {
					d.errorf(v, path, "%v", err)
					return
				}
			} else if list, ok := d.list(v, path); ok {
				args = list
			} else {
				return
			}
			if len(args) == 0 {
				d.errorf(v, path, `empty: give the command that starts a worker, e.g. "php worker.php", or leave the key out and pass the worker script to peregrine serve`)
				return
			}
			*p = args
		},
		func() *yaml.Node {
			if len(*p) == 0 {
				return nil
			}
			if !slices.ContainsFunc(*p, func(s string) bool { return !plainWord(s) }) {
				return stringNode(strings.Join(*p, " "))
			}
			n := listNode(*p)
			n.Style = yaml.FlowStyle
			return n
		},
	}
}

// mapKey reads a mapping of names to strings and adds it to the map at p, so that the file's
// entries join the defaults rather than replace them.
func mapKey(name string, p *map[string]string) key {
	return key{name,
		func(d *decoder, v *yaml.Node, path string) {
			d.stringMap(v, path, func(name, value string) {
				if *p == nil {
					*p = map[string]string{}
				}
				(*p)[name] = value
			})
		},
		func() *yaml.Node {
			n := &yaml.Node{Kind: yaml.MappingNode}
			names := make([]string, 0, len(*p))
			for name := range *p {
				names = append(names, name)
			}
			slices.Sort(names)
			for _, name := range names {
				n.Content = append(n.Content, keyNode(name), stringNode((*p)[name]))
			}
			if len(names) == 0 {
				n.Style = yaml.FlowStyle
			}
			return n
		},
	}
}

// keyNode is a mapping key, written as is: keys are not expanded.
func keyNode(s string) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s}
}

// stringNode is a string value, quoted where YAML would read it as another type, with its
// dollars escaped so that loading it back does not expand them.
func stringNode(s string) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: escapeDollars(s)}
}

// plainNode is a number, boolean, size or duration, written without quotes.
func plainNode(s string) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Value: s}
}

func listNode(list []string) *yaml.Node {
	n := &yaml.Node{Kind: yaml.SequenceNode}
	for _, s := range list {
		n.Content = append(n.Content, stringNode(s))
	}
	if len(list) == 0 {
		n.Style = yaml.FlowStyle
	}
	return n
}
