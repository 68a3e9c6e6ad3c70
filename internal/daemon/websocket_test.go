package daemon

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/peregrinephp/peregrine/internal/config"
	"github.com/peregrinephp/peregrine/internal/pool"
	"github.com/peregrinephp/peregrine/internal/websocket"
)

// TestReloadSaysWebSocketNeedsARestart: the hub is made once, so a reload that changes the
// websocket section says so rather than pretend it applied.
func TestReloadSaysWebSocketNeedsARestart(t *testing.T) {
	running := testConfig(t)
	r, log, _ := newTestReloader(t, &running, &recordingPool{})
	next := running
	next.WebSocket.PingInterval = config.Duration(5 * time.Second)
	r.apply(next, nil)
	if !strings.Contains(log.String(), "need a restart") || !strings.Contains(log.String(), "websocket") {
		t.Errorf("log:\n%s", log)
	}
}

// TestDirectEventPoolIsNotSelfRetiring: the pool of WebSocket events in direct mode is served
// the proxied way, so its options do not say SelfRetiring as direct mode's own pool's do: its
// resets stop each old worker within stop_timeout rather than leave it draining, unwatched by
// direct mode's backstop.
func TestDirectEventPoolIsNotSelfRetiring(t *testing.T) {
	ws := &webSockets{handoff: &websocket.Handoff{}, log: slog.New(slog.DiscardHandler)}
	ws.eventPool(context.Background(), nil, pool.Options{Size: 1, SelfRetiring: true}, true)
	if ws.events.opts.Load().SelfRetiring {
		t.Error("the event pool drains its old workers as direct mode's do")
	}
}
