package main

import (
	"flag"
	"fmt"
	"strconv"

	"github.com/peregrinephp/peregrine/internal/config"
)

// serveArgs are serve's arguments that make its config, which config check takes too, so that
// it checks what serve would run: a config meant for serve --laravel DIR is checked with its
// worker script, workers.dir and http.root, as serve adds them.
type serveArgs struct {
	file                                   string   // -c
	address, count, root, laravel, symfony string   // the flags that override the file
	script                                 []string // the worker script, if given
	direct                                 bool     // --direct: http.direct
}

// serveFlags declares serve's config flags on fs for command (serve, or config check, whose
// help says it takes them as serve does), and returns what makes serveArgs of them and of the
// positional arguments once fs is parsed: at most one worker script, and none beside --laravel
// or --symfony.
func serveFlags(fs *flag.FlagSet, command string) func(pos []string) (serveArgs, error) {
	help := func(s string) string {
		if command == "serve" {
			return s
		}
		return s + " (checked as serve takes it)"
	}
	file := fs.String("c", "", help("config file"))
	address := fs.String("address", "", help("listen address, host:port"))
	count := fs.String("workers", "", help("number of workers"))
	root := fs.String("root", "", help("document root: its files are served as they are; without a worker script, classic mode runs its PHP scripts as PHP-FPM would"))
	laravel := fs.String("laravel", "", help("serve the Laravel application in DIR in worker mode (static files from DIR/public)"))
	symfony := fs.String("symfony", "", help("serve the Symfony application in DIR in worker mode through symfony/runtime (static files from DIR/public)"))
	direct := fs.Bool("direct", false, help("direct mode: the workers answer HTTP/1.1 on the address themselves (http.direct)"))
	return func(pos []string) (serveArgs, error) {
		if len(pos) > 1 {
			return serveArgs{}, fmt.Errorf("%s: one worker script at most, got %q", command, pos)
		}
		if len(pos) == 1 && (*laravel != "" || *symfony != "") {
			return serveArgs{}, fmt.Errorf("%s: --laravel and --symfony bring their own worker script; drop %q", command, pos[0])
		}
		return serveArgs{file: *file, address: *address, count: *count, root: *root, laravel: *laravel, symfony: *symfony, script: pos, direct: *direct}, nil
	}
}

// configFile returns the file serve reads: -c's, or ./peregrine.yaml when neither a worker
// script, --root, --laravel nor --symfony says what to serve; "" when the defaults are the base.
func (a serveArgs) configFile() string {
	switch {
	case a.file != "":
		return a.file
	case len(a.script) > 0 || a.root != "" || a.laravel != "" || a.symfony != "":
		return ""
	}
	return "peregrine.yaml"
}

// load reads file (or takes the defaults when it is "") and applies the command line over it,
// then validates the result.
func (a serveArgs) load(file string) (config.Config, error) {
	cfg := config.Default()
	if file != "" {
		var err error
		if cfg, err = config.Load(file); err != nil {
			return cfg, err
		}
	}
	if len(a.script) == 1 {
		cfg.Workers.Command = []string{"php", a.script[0]}
	}
	if err := applyFramework(&cfg, a.laravel, a.symfony); err != nil {
		return cfg, err
	}
	if a.root != "" {
		cfg.HTTP.Root = a.root
	}
	if a.address != "" {
		cfg.HTTP.Address = a.address
	}
	if a.direct {
		cfg.HTTP.Direct = true
	}
	if a.count != "" {
		n, err := strconv.Atoi(a.count)
		if err != nil || n < 0 {
			return cfg, fmt.Errorf("--workers: want a whole number of workers, got %q", a.count)
		}
		cfg.Workers.Count = n
	}
	return cfg, cfg.Validate()
}
