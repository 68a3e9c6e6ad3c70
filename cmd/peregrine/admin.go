package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/peregrinephp/peregrine/internal/admin"
	"github.com/peregrinephp/peregrine/internal/config"
)

// workersTimeout bounds peregrine workers: the listing is a snapshot the server answers at once.
const workersTimeout = 10 * time.Second

// workers prints the running server's workers: peregrine workers [-c FILE] [--json].
func workers(args []string, stdout io.Writer) error {
	return listing("workers", args, stdout, (*admin.Client).Workers, admin.WriteTable)
}

// listing runs a command that prints a snapshot the running server answers at once (its workers,
// its tables): as a table, or as JSON with --json.
func listing[T any](name string, args []string, stdout io.Writer, fetch func(*admin.Client, context.Context) (T, error), table func(io.Writer, T) error) error {
	c, cfg, fs, err := adminClient(name, args)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, workersTimeout)
	defer cancel()
	v, err := fetch(c, ctx)
	if err != nil {
		return adminError(name, cfg, fs, err)
	}
	if jsonFlag(fs) {
		return printJSON(stdout, v)
	}
	return table(stdout, v)
}

// reset replaces every worker of the running server like SIGHUP and returns when all are
// replaced: peregrine reset [-c FILE] [--json].
func reset(args []string, stdout io.Writer) error {
	c, cfg, fs, err := adminClient("reset", args)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, resetTimeout(cfg.Workers))
	defer cancel()
	res, err := c.Reset(ctx)
	if err != nil {
		return adminError("reset", cfg, fs, err)
	}
	if jsonFlag(fs) {
		return printJSON(stdout, res)
	}
	_, err = fmt.Fprintf(stdout, "replaced %d workers in %s\n", res.Replaced,
		time.Duration(res.DurationSeconds*float64(time.Second)).Round(time.Millisecond))
	return err
}

// adminClient loads the config of command name and returns a client for its admin listener.
func adminClient(name string, args []string) (*admin.Client, config.Config, *flag.FlagSet, error) {
	cfg, fs, err := loadForCommand(name, args)
	if err != nil {
		return nil, cfg, nil, err
	}
	if cfg.Admin.Address == "" {
		return nil, cfg, nil, fmt.Errorf("admin.address is not set in %s; the %s command talks to the running server through it.\n"+
			"Set it there (e.g. 127.0.0.1:9180) and restart peregrine serve", configFile(fs), name)
	}
	c, err := admin.NewClient(cfg.Admin.Address)
	if err != nil {
		return nil, cfg, nil, fmt.Errorf("%s: admin.address in %s: %w", name, configFile(fs), err)
	}
	return c.WithToken(cfg.Admin.Token), cfg, fs, nil
}

// adminError explains a failed call to the admin listener.
func adminError(name string, cfg config.Config, fs *flag.FlagSet, err error) error {
	if errors.Is(err, admin.ErrUnreachable) {
		return fmt.Errorf("%s: %w\nIs peregrine serve running with %s (admin.address: %s)?",
			name, err, configFile(fs), cfg.Admin.Address)
	}
	if errors.Is(err, admin.ErrUnauthorized) {
		return fmt.Errorf("%s: %w\nSet admin.token in %s to the running server's token", name, err, configFile(fs))
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%s: the server at %s (admin.address) did not answer in time: %w", name, cfg.Admin.Address, err)
	}
	return fmt.Errorf("%s: %w", name, err)
}

// resetTimeout is how long peregrine reset waits: enough for every configured worker to finish
// its request, boot a successor and stop, and never less than ten minutes, since the running
// server may have more workers than this file says.
func resetTimeout(w config.Workers) time.Duration {
	per := time.Duration(w.ExecTimeout) + time.Duration(w.BootTimeout) + time.Duration(w.StopTimeout)
	return max(10*time.Minute, time.Duration(w.ResolvedCount())*per+time.Minute)
}

func configFile(fs *flag.FlagSet) string {
	return fs.Lookup("c").Value.String()
}

func jsonFlag(fs *flag.FlagSet) bool {
	v, _ := fs.Lookup("json").Value.(flag.Getter).Get().(bool)
	return v
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
