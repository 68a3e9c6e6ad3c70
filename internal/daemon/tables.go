package daemon

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/peregrinephp/peregrine/internal/admin"
	"github.com/peregrinephp/peregrine/internal/config"
	"github.com/peregrinephp/peregrine/internal/tables"
)

// sharedTables is the server's shared tables (docs/tables.md); nil without tables.define.
type sharedTables struct {
	seg *tables.Segment
}

// startTables creates the tables of tables.define in shared memory, after removing the
// segments of servers that died without removing theirs, and runs tables.init to fill them.
// It returns nil without tables.define. The caller removes the tables when the server stops.
func startTables(ctx context.Context, cfg config.Config, log *slog.Logger) (*sharedTables, error) {
	if len(cfg.Tables.Define) == 0 {
		return nil, nil
	}
	specs, err := tables.Specs(cfg.Tables.Define)
	if err != nil {
		return nil, err
	}
	dir := tables.DefaultDir()
	if n, err := tables.Sweep(dir); err != nil {
		log.Warn("removing the tables of servers that are no longer running", "err", err)
	} else if n > 0 {
		log.Info("removed the tables of servers that are no longer running", "count", n)
	}
	seg, err := tables.Create(dir, specs, os.Getpid())
	if err != nil {
		return nil, err
	}
	t := &sharedTables{seg: seg}
	stats, _ := seg.Stats()
	for _, s := range stats {
		log.Info("table created", "table", s.Name, "capacity", s.Capacity, "bytes", s.Bytes)
	}
	if len(cfg.Tables.Init) > 0 {
		if err := t.runInit(ctx, cfg, log); err != nil {
			_ = seg.Remove()
			return nil, err
		}
	}
	return t, nil
}

// runInit runs tables.init to its end as a worker would run (same runtime, directory and
// environment), with nothing on fds 3 and 4, which the native runtime insists on. It has no time
// limit, as `php` run from a shell has none: a data load is not a request, and php.ini's
// max_execution_time (30 s in Debian's, which the native runtime reads) or workers.php_ini's
// would end it half done. A -d in the init command itself still sets one.
func (t *sharedTables) runInit(ctx context.Context, cfg config.Config, log *slog.Logger) error {
	c := cfg
	c.Workers.Command = cfg.Tables.Init
	c.Workers.PHPIni = maps.Clone(cfg.Workers.PHPIni)
	if c.Workers.PHPIni == nil {
		c.Workers.PHPIni = map[string]string{}
	}
	c.Workers.PHPIni["max_execution_time"] = "0"
	argv, _, err := workerArgv(c, "")
	if err != nil {
		return fmt.Errorf("tables.init: %w", err)
	}
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("tables.init: %w", err)
	}
	defer null.Close()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = cfg.Workers.Dir
	cmd.Env = append(workerEnv(cfg), t.Env()...)
	cmd.ExtraFiles = []*os.File{null, null}
	out := &initOutput{log: log}
	cmd.Stdout, cmd.Stderr = out, out
	start := time.Now()
	log.Info("running tables.init", "command", strings.Join(cfg.Tables.Init, " "))
	err = cmd.Run()
	out.flush()
	if err != nil {
		return fmt.Errorf("tables.init (%s) failed: %w\n%s", strings.Join(cfg.Tables.Init, " "), err, strings.TrimSpace(out.tail.String()))
	}
	stats, _ := t.seg.Stats()
	for _, s := range stats {
		log.Info("table filled", "table", s.Name, "rows", s.Rows, "capacity", s.Capacity,
			"duration", time.Since(start).Round(time.Millisecond).String())
	}
	return nil
}

// Env is what workers need to find the tables: PEREGRINE_TABLES.
func (t *sharedTables) Env() []string {
	if t == nil {
		return nil
	}
	return []string{tables.EnvVar + "=" + t.seg.Path()}
}

// admin is the tables for the admin listener; nil without tables.
func (t *sharedTables) admin() admin.Tables {
	if t == nil {
		return nil
	}
	return t.seg
}

// remove deletes the segment when the server stops.
func (t *sharedTables) remove(log *slog.Logger) {
	if t == nil {
		return
	}
	if err := t.seg.Remove(); err != nil {
		log.Warn("removing the shared tables", "err", err)
	}
}

// initOutput logs what tables.init writes, a line at a time as it comes (a load may take
// minutes), and keeps the last few KiB for the error when it fails.
type initOutput struct {
	log  *slog.Logger
	line bytes.Buffer
	tail bytes.Buffer
}

const initTail = 4096

func (o *initOutput) Write(p []byte) (int, error) {
	o.tail.Write(p)
	if o.tail.Len() > 2*initTail {
		keep := o.tail.Bytes()[o.tail.Len()-initTail:]
		o.tail.Reset()
		o.tail.WriteString("...")
		o.tail.Write(keep)
	}
	o.line.Write(p)
	for {
		i := bytes.IndexByte(o.line.Bytes(), '\n')
		if i < 0 {
			break
		}
		o.emit(string(o.line.Next(i + 1)))
	}
	return len(p), nil
}

func (o *initOutput) flush() {
	if o.line.Len() > 0 {
		o.emit(o.line.String())
		o.line.Reset()
	}
}

func (o *initOutput) emit(line string) {
	if line = strings.TrimRight(line, "\r\n"); line != "" {
		o.log.Info("tables.init output", "line", line)
	}
}
