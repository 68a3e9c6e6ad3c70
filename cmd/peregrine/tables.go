package main

import (
	"io"

	"github.com/peregrinephp/peregrine/internal/admin"
)

// tablesCommand prints the running server's shared tables, their rows used, capacity and
// memory: peregrine tables [-c FILE] [--json].
func tablesCommand(args []string, stdout io.Writer) error {
	return listing("tables", args, stdout, (*admin.Client).Tables, admin.WriteTables)
}
