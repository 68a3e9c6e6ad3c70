package daemon

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/peregrinephp/peregrine/internal/admin"
	"github.com/peregrinephp/peregrine/internal/config"
	"github.com/peregrinephp/peregrine/internal/httpserver"
	"github.com/peregrinephp/peregrine/internal/phpcall"
	"github.com/peregrinephp/peregrine/internal/pool"
	"github.com/peregrinephp/peregrine/internal/websocket"
	"github.com/peregrinephp/peregrine/internal/worker"
)

// wsKeyEnv is the environment variable that gives every worker the secret WebSocket events carry.
const wsKeyEnv = "PEREGRINE_WEBSOCKET_KEY"

// webSockets is the server's WebSocket side (docs/websocket.md): nil in classic mode. It is
// prepared before the workers start (their environment needs its key and the call socket)
// and started once the pool exists.
type webSockets struct {
	cfg   config.WebSocket
	key   string
	calls *phpcall.Server // its own call socket when jobs and kv opened none
	bg    *background
	hub   *websocket.Hub
	log   *slog.Logger
	once  sync.Once

	// In direct mode (http.direct), the workers hand WebSocket upgrades to handoff, and
	// handoffSrv serves them with the front's handler (docs/direct.md, "WebSockets").
	handoff    *websocket.Handoff
	handoffSrv *http.Server
	// events is the pool the hub's events run on in direct mode, whose own workers take no
	// request from the daemon: workers of the same script, as many, served the proxied way.
	// It boots with the first event, so that direct mode without WebSockets costs no process.
	events        *livePool
	eventsMu      sync.Mutex
	eventsStarted bool
	eventsStopped bool
	eventsCtx     context.Context // the server's: the pool's workers live as long as it, not as an event
}

// handoffMaxBytes is the most a worker may have read of a connection it hands over: its
// input buffer's limit (native/direct.c: the head's 1 MiB and 64 KiB more), with room.
const handoffMaxBytes = 2 << 20

// prepareWebSockets makes the key and, when bg has no call socket, one for the ws.* calls.
func prepareWebSockets(cfg config.Config, bg *background, log *slog.Logger) (*webSockets, error) {
	if len(cfg.Workers.Command) == 0 {
		return nil, nil // classic mode: Validate refused a websocket section that says otherwise
	}
	b := make([]byte, websocket.KeyLen/2)
	_, _ = rand.Read(b)
	ws := &webSockets{cfg: cfg.WebSocket, key: hex.EncodeToString(b), bg: bg, log: log}
	if bg == nil {
		calls, err := phpcall.Listen("", phpcall.Options{Logger: log})
		if err != nil {
			return nil, err
		}
		ws.calls = calls
	}
	if cfg.HTTP.Direct {
		h, err := websocket.ListenHandoff(os.TempDir(), handoffMaxBytes, log)
		if err != nil {
			if ws.calls != nil {
				_ = ws.calls.Close()
			}
			return nil, fmt.Errorf("http.direct with WebSockets: %w", err)
		}
		ws.handoff = h
	}
	return ws, nil
}

// Env is what every worker needs: the key, and the call socket if it is this one's.
func (ws *webSockets) Env() []string {
	if ws == nil {
		return nil
	}
	env := []string{wsKeyEnv + "=" + ws.key}
	if ws.calls != nil {
		env = append(env, phpcall.EnvVar+"="+ws.calls.Path())
	}
	if ws.handoff != nil {
		env = append(env, websocket.HandoffEnv+"="+ws.handoff.Path())
	}
	return env
}

// start makes the hub on p and connects the broker.
func (ws *webSockets) start(ctx context.Context, p websocket.Runner, maxConnections int) error {
	if ws == nil {
		return nil
	}
	broker, err := websocket.Dial(ctx, ws.cfg.Broker, ws.log)
	if err != nil {
		return fmt.Errorf("websocket.broker: %w", err)
	}
	ws.hub, err = websocket.New(ctx, p, websocket.Options{
		MaxMessageSize: int64(ws.cfg.MaxMessageSize),
		PingInterval:   time.Duration(ws.cfg.PingInterval),
		SendQueue:      int64(ws.cfg.SendQueue),
		AllowedOrigins: ws.cfg.AllowedOrigins,
		MaxConnections: maxConnections,
		Broker:         broker,
		Key:            ws.key,
		Logger:         ws.log,
	})
	if err != nil {
		return fmt.Errorf("websocket.broker: %w", err)
	}
	if ws.calls != nil {
		ws.calls.SetWebSocket(ws.hub)
	} else {
		ws.bg.calls.SetWebSocket(ws.hub)
	}
	return nil
}

// serveHandoff serves, in direct mode, the connections the workers hand over with h, the
// handler of the proxied front: its hub answers the upgrade (Origin, the cap, onOpen) and holds
// the connection; whatever else (a refusal, an upgrade the hub does not want) is answered once
// and the connection closed, since the worker forgot it.
func (ws *webSockets) serveHandoff(h http.Handler, readHeaderTimeout time.Duration) {
	if ws == nil || ws.handoff == nil {
		return
	}
	front := h
	h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Only what the hub takes: the front would run anything else on direct mode's
		// workers, which take no request from the daemon (a worker would leave).
		if ws.hub == nil || !ws.hub.Wants(r) {
			http.Error(w, "not a WebSocket upgrade", http.StatusBadRequest)
			return
		}
		front.ServeHTTP(w, r)
	})
	ws.handoffSrv = &http.Server{
		Handler:           h,
		ReadHeaderTimeout: readHeaderTimeout,
		ConnContext:       httpserver.ConnContext,
		ErrorLog:          slog.NewLogLogger(ws.log.Handler(), slog.LevelDebug),
	}
	ws.handoffSrv.SetKeepAlivesEnabled(false)
	go func() { _ = ws.handoffSrv.Serve(ws.handoff) }()
}

// eventPool returns the pool the hub's events run on: p, or in direct mode a pool of its own
// on o (the workers' options without direct mode's socket and variables), booted by the
// first event.
func (ws *webSockets) eventPool(ctx context.Context, p *livePool, o pool.Options, native bool) websocket.Runner {
	if ws == nil || ws.handoff == nil {
		return p
	}
	// Its workers are served the proxied way, whatever http.direct says: the pool counts their
	// jobs, an idle one that exits has crashed, and a reset stops each old one within
	// stop_timeout rather than let it drain in the background as direct mode's workers do.
	o.SelfRetiring = false
	ws.events, ws.eventsCtx = newLivePool(o, native, ws.log), ctx
	return eventRunner{ws}
}

// eventRunner boots the event pool before the first event it runs.
type eventRunner struct{ ws *webSockets }

func (r eventRunner) Do(ctx context.Context, call *worker.Call) (int, error) {
	if err := r.ws.startEvents(); err != nil {
		return 0, err
	}
	return r.ws.events.Do(ctx, call)
}

// startEvents boots the event pool once; a boot that failed is tried again by the next event.
func (ws *webSockets) startEvents() error {
	ws.eventsMu.Lock()
	defer ws.eventsMu.Unlock()
	switch {
	case ws.eventsStopped:
		return pool.ErrStopped
	case ws.eventsStarted:
		return nil
	}
	if err := ws.events.Start(ws.eventsCtx); err != nil {
		return fmt.Errorf("the PHP workers of WebSocket events could not start: %w", err)
	}
	ws.eventsStarted = true
	return nil
}

// resetEvents replaces the event pool's workers, if it runs, as a reset does the others'.
func (ws *webSockets) resetEvents(ctx context.Context) error {
	if ws == nil || ws.events == nil {
		return nil
	}
	ws.eventsMu.Lock()
	started := ws.eventsStarted && !ws.eventsStopped
	ws.eventsMu.Unlock()
	if !started {
		return nil
	}
	return ws.events.Reset(ctx)
}

// adminPool returns p for the admin listener, with, in direct mode, the workers of the event
// pool listed after p's once it runs, as the group "websocket": `peregrine workers` shows them.
func (ws *webSockets) adminPool(p admin.Pool) admin.Pool {
	if ws == nil || ws.events == nil {
		return p
	}
	return eventsAdminPool{Pool: p, ws: ws}
}

// eventsAdminPool is an admin.Pool that lists the event pool's workers too.
type eventsAdminPool struct {
	admin.Pool
	ws *webSockets
}

// Workers implements admin.Pool.
func (e eventsAdminPool) Workers() []pool.WorkerInfo {
	infos := e.Pool.Workers()
	e.ws.eventsMu.Lock()
	running := e.ws.eventsStarted && !e.ws.eventsStopped
	e.ws.eventsMu.Unlock()
	if !running {
		return infos
	}
	for _, w := range e.ws.events.Workers() {
		w.Group = "websocket"
		infos = append(infos, w)
	}
	return infos
}

// upgrader returns the hub for httpserver.Options, or nil (an untyped nil: no WebSockets).
func (ws *webSockets) upgrader() httpserver.Upgrader {
	if ws == nil || ws.hub == nil {
		return nil
	}
	return ws.hub
}

// admin returns the hub for admin.Options, or nil.
func (ws *webSockets) admin() admin.WebSocket {
	if ws == nil || ws.hub == nil {
		return nil
	}
	return ws.hub
}

// close ends every connection within ctx, then the call socket.
func (ws *webSockets) close(ctx context.Context) {
	if ws == nil {
		return
	}
	ws.once.Do(func() {
		if ws.handoff != nil { // first: no connection comes in while the hub closes
			_ = ws.handoff.Close()
		}
		if ws.hub != nil {
			ws.hub.Close(ctx)
		}
		// After the hub: closing its server before would cut the upgrades whose onOpen the hub
		// waits for (their requests are still the server's); by now each is hijacked, the hub's.
		if ws.handoffSrv != nil {
			_ = ws.handoffSrv.Close()
		}
		if ws.events != nil { // after the hub: onClose runs on it
			ws.eventsMu.Lock()
			started := ws.eventsStarted
			ws.eventsStopped = true
			ws.eventsMu.Unlock()
			if started {
				ws.events.Stop(ctx)
			}
		}
		if ws.calls != nil {
			_ = ws.calls.Close()
		}
	})
}
