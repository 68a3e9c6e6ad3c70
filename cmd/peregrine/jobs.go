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
	"strings"
	"syscall"
	"time"

	"github.com/peregrinephp/peregrine/internal/admin"
	"github.com/peregrinephp/peregrine/internal/config"
)

const jobsUsage = `usage:
  peregrine jobs [-c FILE] [--json]                       per pipeline: queued, delayed, running, failed, dead, consumers
  peregrine jobs push PIPELINE PAYLOAD [--delay 30s]      PAYLOAD is JSON; anything else is pushed as a JSON string
  peregrine jobs dead PIPELINE [--limit 100]              the dead letters (at most 1000): id, attempts, when, error, payload
  peregrine jobs dead PIPELINE show ID                    one dead letter whole: payload, headers, error
  peregrine jobs retry PIPELINE [ID...]                   every dead letter back to the queue, or only these
  peregrine jobs delete PIPELINE ID...                    drop these dead letters
  peregrine jobs pause|resume PIPELINE                    this server's consumers stop or go on taking its jobs
                                                          (until it restarts: a pause is not stored)`

// jobsArgs are the arguments each jobs command wants, as its usage names them; a last name
// ending in "..." is one or more, "[...]" any number.
var jobsArgs = map[string][]string{
	"list": {}, "push": {"PIPELINE", "PAYLOAD"}, "retry": {"PIPELINE", "[ID...]"}, "delete": {"PIPELINE", "ID..."},
	"pause": {"PIPELINE"}, "resume": {"PIPELINE"}, "dead": {"PIPELINE"}, "dead show": {"PIPELINE", "ID"},
}

// jobsVerb splits pos into the command (list, push, ..., "dead show") and its arguments, and
// says what is missing or extra.
func jobsVerb(pos []string) (string, []string, error) {
	verb := "list"
	if len(pos) > 0 {
		verb, pos = pos[0], pos[1:]
	}
	if verb == "dead" && len(pos) >= 2 { // dead PIPELINE show ID
		if pos[1] != "show" {
			return "", nil, fmt.Errorf("jobs dead %s: unexpected %q; want show ID (retry and delete are jobs retry|delete PIPELINE ID...)", pos[0], pos[1])
		}
		verb, pos = "dead show", append([]string{pos[0]}, pos[2:]...)
	}
	want, ok := jobsArgs[verb]
	if !ok {
		return "", nil, fmt.Errorf("jobs: unknown command %q; want push, retry, delete, dead, pause or resume", verb)
	}
	need, many := len(want), false
	if need > 0 {
		switch last := want[need-1]; {
		case strings.HasPrefix(last, "["):
			need, many = need-1, true
		case strings.HasSuffix(last, "..."):
			many = true
		}
	}
	switch {
	case len(pos) < need:
		return "", nil, fmt.Errorf("jobs %s: missing %s", verb, strings.Join(want[len(pos):need], " "))
	case len(pos) > len(want) && !many:
		return "", nil, fmt.Errorf("jobs %s: unexpected %q after %s", verb, strings.Join(pos[len(want):], " "), strings.Join(want, " "))
	}
	return verb, pos, nil
}

// jobsCommand talks to the running server's pipelines through the admin listener.
func jobsCommand(args []string, stdout io.Writer) error {
	fs := newFlagSet("jobs")
	file := fs.String("c", "peregrine.yaml", "config file")
	asJSON := fs.Bool("json", false, "print JSON")
	delay := fs.Duration("delay", 0, "run the pushed job after this long")
	limit := fs.Int("limit", 100, "list at most this many dead letters")
	pos, err := parseInterleaved(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		return &helpRequested{usage: jobsUsage, fs: fs}
	}
	if err != nil {
		return fmt.Errorf("jobs: %w\n%s", err, jobsUsage)
	}
	verb, pos, err := jobsVerb(pos)
	if err != nil {
		return fmt.Errorf("%w\n%s", err, jobsUsage)
	}
	if *delay < 0 {
		return fmt.Errorf("jobs push: --delay cannot be negative")
	}
	if *limit < 1 || *limit > admin.MaxDeadListed {
		return fmt.Errorf("jobs dead: --limit must be from 1 to %d, got %d", admin.MaxDeadListed, *limit)
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
		if len(pos) > 1 {
			return jobsEach(ctx, stdout, *asJSON, pos[0], pos[1:], "back in the queue", c.RetryDeadJob, adminErr(cfg, fs))
		}
		n, err := c.RetryJobs(ctx, pos[0])
		if err != nil {
			return adminError("jobs retry", cfg, fs, err)
		}
		if !*asJSON {
			_, err = fmt.Fprintf(stdout, "%d dead letters of %s back in the queue\n", n, pos[0])
			return err
		}
		out = map[string]int{"retried": n}
	case "delete":
		return jobsEach(ctx, stdout, *asJSON, pos[0], pos[1:], "deleted", c.DeleteDeadJob, adminErr(cfg, fs))
	case "dead":
		list, err := c.DeadJobs(ctx, pos[0], *limit)
		if err != nil {
			return adminError("jobs dead", cfg, fs, err)
		}
		if !*asJSON {
			return admin.WriteDeadTable(stdout, list)
		}
		out = list
	case "dead show":
		j, err := c.DeadJob(ctx, pos[0], pos[1])
		if err != nil {
			return adminError("jobs "+verb, cfg, fs, err)
		}
		if !*asJSON {
			return admin.WriteDeadJob(stdout, j)
		}
		out = j
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

// adminErr returns adminError for the jobs command's config and flags.
func adminErr(cfg config.Config, fs *flag.FlagSet) func(string, error) error {
	return func(what string, err error) error { return adminError(what, cfg, fs, err) }
}

// jobsEach calls call for each dead letter of ids, one by one, printing what became of each;
// it goes on after a failure and returns them all.
func jobsEach(ctx context.Context, stdout io.Writer, asJSON bool, pipeline string, ids []string, done string,
	call func(ctx context.Context, pipeline, id string) error, fail func(string, error) error) error {
	var errs []error
	results := map[string]string{}
	for _, id := range ids {
		if err := call(ctx, pipeline, id); err != nil {
			errs = append(errs, fail("dead letter "+id+" of "+pipeline, err))
			results[id] = errs[len(errs)-1].Error()
			continue
		}
		results[id] = done
		if !asJSON {
			fmt.Fprintf(stdout, "dead letter %s of %s %s\n", id, pipeline, done)
		}
	}
	if asJSON {
		if err := printJSON(stdout, results); err != nil {
			return err
		}
	}
	return errors.Join(errs...)
}
