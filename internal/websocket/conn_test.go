package websocket

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"testing"

	gorilla "github.com/gorilla/websocket"
)

// TestCloseOf: the code PHP's onClose gets for each way gorilla's ReadMessage fails. Only
// gorilla's own protocol errors (handleProtocolError's shape; FuzzHub's seeds check the real
// ones against the close frame sent) are 1002: the end of the bytes and socket errors,
// wrapped or not, are a vanished peer.
func TestCloseOf(t *testing.T) {
	timeout := &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
	reset := &net.OpError{Op: "read", Net: "tcp", Err: errors.New("connection reset by peer")}
	for _, tc := range []struct {
		err    error
		code   int
		reason string
	}{
		{&gorilla.CloseError{Code: 4001, Text: "bye"}, 4001, "bye"},
		{&gorilla.CloseError{Code: gorilla.CloseAbnormalClosure, Text: "unexpected EOF"}, gorilla.CloseAbnormalClosure, "unexpected EOF"},
		{gorilla.ErrReadLimit, gorilla.CloseMessageTooBig, "message too big"},
		{timeout, gorilla.CloseAbnormalClosure, "no answer to pings"},
		{errors.New("websocket: RSV2 set, bad opcode 3"), gorilla.CloseProtocolError, "RSV2 set, bad opcode 3"},
		{io.EOF, gorilla.CloseAbnormalClosure, ""},
		{io.ErrUnexpectedEOF, gorilla.CloseAbnormalClosure, ""},
		{reset, gorilla.CloseAbnormalClosure, ""},
		{fmt.Errorf("websocket: %w", reset), gorilla.CloseAbnormalClosure, ""},
	} {
		if code, reason := closeOf(tc.err); code != tc.code || reason != tc.reason {
			t.Errorf("closeOf(%v) = %d %q, want %d %q", tc.err, code, reason, tc.code, tc.reason)
		}
	}
}
