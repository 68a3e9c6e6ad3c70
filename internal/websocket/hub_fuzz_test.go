package websocket

import (
	"context"
	"testing"
	"time"
	"unicode/utf8"

	gorilla "github.com/gorilla/websocket"
)

// fuzzPing is the hub's ping interval in FuzzHub: a client that goes silent without closing
// is dropped after two of them, so the hang check need not wait 30 s.
const fuzzPing = 50 * time.Millisecond

// FuzzHub sends any bytes, after a valid upgrade, into a hub over a real connection, its PHP a
// stand-in that sends every message back. The first byte says whether the client then shuts
// its side (bit 0 clear) or stays silent with it open. Whatever the bytes: nothing panics; the
// server ends the connection within wireDeadline (silent: by its pings); PHP sees one open,
// then messages that are within max_message_size and, for text, UTF-8, then one close; and
// once the hub is closed no goroutine of it or of gorilla's is left.
func FuzzHub(f *testing.F) {
	for _, tc := range wsCases {
		if len(tc.in) <= 16<<10 {
			f.Add(append([]byte{0}, tc.in...))
			f.Add(append([]byte{1}, tc.in...))
		}
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) == 0 || len(in) > 64<<10 {
			return
		}
		keepOpen := in[0]&1 != 0
		php := newFakePHP()
		php.echo = true
		h, err := New(t.Context(), php, Options{MaxMessageSize: diffMaxMessage, PingInterval: fuzzPing})
		if err != nil {
			t.Fatal(err)
		}
		s := startWireServer(hubHandler(h))
		sc, xerr := s.exchange(in[1:], keepOpen)
		closed := false
		select {
		case <-php.closed:
			closed = true
		case <-time.After(wireDeadline):
		}
		ctx, cancel := context.WithTimeout(context.Background(), wireDeadline)
		h.Close(ctx)
		cancel()
		s.srv.Close()
		if xerr != nil {
			t.Fatal(xerr)
		}
		if !closed {
			t.Fatalf("onClose did not run within %s of the connection's end", wireDeadline)
		}
		events := php.seen()
		for i, e := range events {
			switch {
			case i == 0 && e.Kind != KindOpen, i == len(events)-1 && e.Kind != KindClose:
				t.Fatalf("event %d of %d is of kind %d", i, len(events), e.Kind)
			case i > 0 && i < len(events)-1 && e.Kind != KindMessage:
				t.Fatalf("event %d of %d, between open and close, is of kind %d", i, len(events), e.Kind)
			case e.Kind == KindMessage && len(e.Data) > diffMaxMessage:
				t.Fatalf("a message of %d bytes reached PHP, past max_message_size %d", len(e.Data), diffMaxMessage)
			case e.Kind == KindMessage && !e.Binary && !utf8.Valid(e.Data):
				t.Fatalf("a text message that is not UTF-8 reached PHP: %q", e.Data)
			}
		}
		// PHP hears what the client was told: the code of the server's close frame (the
		// client's own echoed, or the server's), or without one 1006, or 1009 for a length
		// gorilla refused without a frame.
		code, sent := int(events[len(events)-1].Code), serverClose(sc.written())
		if sent != 0 && code != sent || sent == 0 && code != gorilla.CloseAbnormalClosure && code != gorilla.CloseMessageTooBig {
			t.Fatalf("onClose got %d; the server's close frame said %d (0: none)", code, sent)
		}
		if left := leftGoroutines(); left != "" {
			t.Fatalf("goroutines left after the hub closed:\n%s", left)
		}
	})
}
