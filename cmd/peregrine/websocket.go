package main

import (
	"io"

	"github.com/peregrinephp/peregrine/internal/admin"
)

// websocketCommand prints the running server's WebSocket connections, channels and counters:
// peregrine websocket [-c FILE] [--json].
func websocketCommand(args []string, stdout io.Writer) error {
	return listing("websocket", args, stdout, (*admin.Client).WebSocket, admin.WriteWebSocket)
}
