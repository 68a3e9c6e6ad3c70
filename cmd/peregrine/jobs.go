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

const jobsUsage = `usage:
  peregrine jobs [-c FILE] [--json]                       per pipeline: queued, delayed, running, failed, dead, consumers
  peregrine jobs push PIPELINE PAYLOAD [--delay 30s]      PAYLOAD is JSON; anything else is pushed as a JSON string
  peregrine jobs retry PIPELINE                           dead letters back to the queue
  peregrine jobs pause|resume PIPELINE                    this server's consumers stop or go on taking its jobs`

// jobsCommand talks to the running server's pipelines through the admin listener.
func jobsCommand(args []string, stdout io.Writer) error {
	fs := newFlagSet("jobs")
	file := fs.String("c", "peregrine.yaml", "config file")
	asJSON := fs.Bool("json", false, "print JSON")
	delay := fs.Duration("delay", 0, "run the pushed job after this long")
	pos, err := parseInterleaved(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		return &helpRequested{usage: jobsUsage, fs: fs}
	}
	if err != nil {
		return fmt.Errorf("jobs: %w\n%s", err, jobsUsage)
	}
	verb := "list"
	if len(pos) > 0 {
		verb, pos = pos[0], pos[1:]
	}
	want := map[string]int{"list": 0, "push": 2, "retry": 1, "pause": 1, "resume": 1}
	n, ok := want[verb]
	if !ok || len(pos) != n {
		return fmt.Errorf("jobs %s: %w\n%s", verb, errUsage, jobsUsage)
	}
	if *delay < 0 {
		return fmt.Errorf("jobs push: --delay cannot be negative")
	}
	cfg, err := config.Load(*file)
	if err != nil {
		return err
	}
	if cfg.Admin.Address == "" {
		return fmt.Errorf("admin.address is not set in %s; the jobs command talks to the running server through it.\n"+
			"Set it there (e.g. 127.0.0.1:9180) and restart peregrine serve", *file)
	}
	c, err := admin.NewClient(cfg.Admin.Address)
	if err != nil {
		return fmt.Errorf("jobs: admin.address in %s: %w", *file, err)
	}
	c.WithToken(cfg.Admin.Token)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()

	var out any
	switch verb {
	case "list":
		list, err := c.Jobs(ctx)
		if err != nil {
			return adminError("jobs", cfg, fs, err)
		}
		if !*asJSON {
			return admin.WriteJobsTable(stdout, list)
		}
		out = list
	case "push":
		payload := pos[1]
		if !json.Valid([]byte(payload)) {
			b, _ := json.Marshal(payload)
			payload = string(b)
		}
		id, err := c.PushJob(ctx, pos[0], payload, *delay)
		if err != nil {
			return adminError("jobs push", cfg, fs, err)
		}
		if !*asJSON {
			_, err = fmt.Fprintln(stdout, id)
			return err
		}
		out = map[string]string{"id": id}
	case "retry":
		n, err := c.RetryJobs(ctx, pos[0])
		if err != nil {
			return adminError("jobs retry", cfg, fs, err)
		}
		if !*asJSON {
			_, err = fmt.Fprintf(stdout, "%d dead letters of %s back in the queue\n", n, pos[0])
			return err
		}
		out = map[string]int{"retried": n}
	case "pause", "resume":
		if err := c.PauseJobs(ctx, pos[0], verb == "pause"); err != nil {
			return adminError("jobs "+verb, cfg, fs, err)
		}
		if !*asJSON {
			_, err = fmt.Fprintf(stdout, "%s %sd\n", pos[0], verb)
			return err
		}
		out = map[string]bool{"paused": verb == "pause"}
	}
	return printJSON(stdout, out)
}
