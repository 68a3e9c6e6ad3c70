package websocket

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	gorilla "github.com/gorilla/websocket"

	"github.com/peregrinephp/peregrine/internal/worker"
)

// gatedOpen is fake PHP whose first event (the onOpen) waits for release, or for its context.
type gatedOpen struct {
	*fakePHP
	first    atomic.Bool
	started  chan struct{}
	release  chan struct{}
	openDone chan error
}

func (g *gatedOpen) Do(ctx context.Context, call *worker.Call) (int, error) {
	if g.first.CompareAndSwap(false, true) {
		close(g.started)
		select {
		case <-g.release:
		case <-ctx.Done():
			g.openDone <- ctx.Err()
			return 0, ctx.Err()
		}
		g.openDone <- nil
	}
	return g.fakePHP.Do(ctx, call)
}

// gatedHub returns a hub on gated fake PHP, served by a test server.
func gatedHub(t *testing.T) (*gatedOpen, *Hub, *httptest.Server) {
	t.Helper()
	php := &gatedOpen{fakePHP: newFakePHP(), started: make(chan struct{}),
		release: make(chan struct{}), openDone: make(chan error, 1)}
	h, err := New(t.Context(), php, Options{})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(hubHandler(h))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { // before srv.Close, should the test fail with onOpen waiting
		select {
		case <-php.release:
		default:
			close(php.release)
		}
	})
	return php, h, srv
}

// TestServerStoppingDuringOnOpen: a server that begins to stop while a connection's onOpen runs
// waits for it. An onOpen that returns in time opens the connection, whose first frame is then
// the 1001 close, and PHP hears its onClose, as for any connection open at the stop: before,
// the socket was dropped after the 101 (1006), with no onClose. An onOpen that outlasts the stop's
// wait is cancelled, and the stop does not hang on it.
func TestServerStoppingDuringOnOpen(t *testing.T) {
	for _, returns := range []bool{true, false} {
		name := "onOpen returns"
		if !returns {
			name = "onOpen outlasts the stop"
		}
		t.Run(name, func(t *testing.T) {
			php, h, srv := gatedHub(t)
			type dialed struct {
				ws   *gorilla.Conn
				resp *http.Response
				err  error
			}
			dial := make(chan dialed, 1)
			go func() {
				ws, resp, err := gorilla.DefaultDialer.Dial("ws"+strings.TrimPrefix(srv.URL, "http")+"/ws", nil)
				dial <- dialed{ws, resp, err}
			}()
			select {
			case <-php.started:
			case <-time.After(wireDeadline):
				t.Fatal("onOpen did not begin")
			}

			wait := wireDeadline
			if !returns {
				wait = 200 * time.Millisecond
			}
			ctx, cancel := context.WithTimeout(context.Background(), wait)
			defer cancel()
			closed := make(chan struct{})
			go func() { h.Close(ctx); close(closed) }()
			deadline := time.Now().Add(wireDeadline)
			for {
				h.mu.RLock()
				closing := h.closing
				h.mu.RUnlock()
				if closing {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("Close did not begin")
				}
				time.Sleep(time.Millisecond)
			}

			if !returns {
				select {
				case <-closed:
				case <-time.After(wireDeadline):
					t.Fatal("Close hung on an onOpen past its wait")
				}
				if err := <-php.openDone; !errors.Is(err, context.Canceled) {
					t.Errorf("onOpen ended with %v, want cancelled", err)
				}
				if d := <-dial; d.err == nil {
					d.ws.Close()
					t.Error("the connection whose onOpen was cancelled opened")
				}
				return
			}

			select {
			case <-closed:
				t.Fatal("Close returned while an onOpen ran")
			default:
			}
			close(php.release)
			d := <-dial
			if d.err != nil {
				t.Fatalf("the upgrade: %v", d.err)
			}
			defer d.ws.Close()
			_ = d.ws.SetReadDeadline(time.Now().Add(wireDeadline))
			_, _, err := d.ws.ReadMessage()
			if !gorilla.IsCloseError(err, gorilla.CloseGoingAway) {
				t.Errorf("the first frame after the 101: %v, want a close with 1001", err)
			}
			select {
			case <-closed:
			case <-time.After(wireDeadline):
				t.Fatal("Close did not return")
			}
			var code uint16
			for _, e := range php.seen() {
				if e.Kind == KindClose {
					code = e.Code
				}
			}
			if code != gorilla.CloseGoingAway {
				t.Errorf("onClose with code %d, want 1001 (events %v)", code, php.seen())
			}
		})
	}
}

// TestClientLeavingDuringOnOpen: a client that leaves while its onOpen runs does not cut
// onOpen short, and PHP hears onClose (1006) after it: an application that pairs the two (a
// presence list, a counter) is not left with an open that never closes. Before, onOpen was
// cancelled mid-run and no onClose came.
func TestClientLeavingDuringOnOpen(t *testing.T) {
	php, h, srv := gatedHub(t)
	t.Cleanup(func() { h.Close(context.Background()) })
	c, err := net.Dial("tcp", strings.TrimPrefix(srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte(upgradeRequest)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-php.started:
	case <-time.After(wireDeadline):
		t.Fatal("onOpen did not begin")
	}
	_ = c.Close()
	select { // a cancel would end onOpen at once; a slow machine can only make this pass
	case err := <-php.openDone:
		t.Fatalf("onOpen ended with %v when its client left", err)
	case <-time.After(500 * time.Millisecond):
	}
	close(php.release)
	if err := <-php.openDone; err != nil {
		t.Fatalf("onOpen ended with %v", err)
	}
	select {
	case <-php.closed:
	case <-time.After(wireDeadline):
		t.Fatalf("no onClose after the open of a client that left (events %v)", php.seen())
	}
	if ev := php.seen(); len(ev) != 2 || ev[0].Kind != KindOpen || ev[1].Kind != KindClose || ev[1].Code != gorilla.CloseAbnormalClosure {
		t.Errorf("events %v, want the open, then the close with 1006", ev)
	}
}
