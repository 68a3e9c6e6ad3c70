package http1

import (
	"bufio"
	"errors"
	"net"
	"net/http"
	"time"
)

// Hijack hands the connection to the caller (a WebSocket upgrade, internal/websocket): from
// then on the server neither reads, writes nor closes it, and its buffers go with it. The
// request's watch is stopped first; a byte it read meanwhile (or its news that the client
// left) comes first out of the returned reader, so the caller must read through it, never the
// bare connection. Hijacking after the answer began is an error.
func (w *response) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if w.committed || w.handlerDone {
		return nil, nil, errors.New("http1: hijack after the answer began")
	}
	c := w.c
	c.watch.end()
	c.hijacked = true
	_ = c.rwc.SetDeadline(time.Time{})
	// The reader keeps reading from c.cr (the socket); the writer writes to the socket.
	rw := bufio.NewReadWriter(c.br, c.bw)
	c.br, c.bw = nil, nil // not returned to the pools: the caller owns them now
	return c.rwc, rw, nil
}

var _ http.Hijacker = (*response)(nil)
