package main

import (
	"context"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/peregrinephp/peregrine/internal/admin"
)

// tablesCommand prints the running server's shared tables, their rows used, capacity and
// memory: peregrine tables [-c FILE] [--json].
func tablesCommand(args []string, stdout io.Writer) error {
	c, cfg, fs, err := adminClient("tables", args)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, workersTimeout)
	defer cancel()
	ts, err := c.Tables(ctx)
	if err != nil {
		return adminError("tables", cfg, fs, err)
	}
	if jsonFlag(fs) {
		return printJSON(stdout, ts)
	}
	return admin.WriteTables(stdout, ts)
}
