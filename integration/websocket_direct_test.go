package integration

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	gorilla "github.com/gorilla/websocket"
)

// directWSConfig is wsConfig's fixture served in direct mode (http.direct): the workers
// answer HTTP and hand WebSocket upgrades to the daemon (docs/direct.md, "WebSockets").
func directWSConfig(t *testing.T, extra string) (string, string) {
	return wsConfig(t, "native", "http:\n  direct: true\n"+extra)
}

// TestDirectWebSocketChat: in direct mode two connections see each other's messages on a
// channel, a worker's plain request publishes to them, the hub checks Origin (403) and the
// connection cap (503) before PHP runs, onOpen's refusal reaches the client, and the worker
// goes on answering HTTP on its other connections. EventStream::subscribe() is refused there.
func TestDirectWebSocketChat(t *testing.T) {
	cfg, _ := directWSConfig(t, "websocket:\n  max_connections: 2\n")
	s := startServer(t, cfg)
	ch := "room-websocket2-" + randomTag()
	ann := dialWS(t, wsURL(s, "/chat?user=ann&join="+ch), nil)
	bob := dialWS(t, wsURL(s, "/chat?user=bob&join="+ch), nil)
	ann.send("pub:" + ch + ":hello from ann")
	if a, b := ann.read(), bob.read(); a != "hello from ann" || b != a {
		t.Fatalf("ann's message: ann got %q, bob %q", a, b)
	}
	bob.send("pub:" + ch + ":hi ann")
	if a, b := ann.read(), bob.read(); a != "hi ann" || b != a {
		t.Fatalf("bob's message: ann got %q, bob %q", a, b)
	}
	if r := get(t, s.URL+"/publish?ch="+ch+"&msg=from-http"); r.Status != 200 {
		t.Fatalf("publish from a request: %d %s", r.Status, r.Body)
	}
	if a, b := ann.read(), bob.read(); a != "from-http" || b != a {
		t.Fatalf("a request's publish: ann got %q, bob %q", a, b)
	}
	if status, body := dialStatus(t, wsURL(s, "/over"), nil); status != http.StatusServiceUnavailable {
		t.Errorf("past websocket.max_connections: %d %q, want 503", status, body)
	}
	_ = bob.c.Close()
	var status int
	eventually(t, 10*time.Second, "bob's place freed, and onOpen's Refused(401)", func() bool {
		status, _ = dialStatus(t, wsURL(s, "/r?refuse=401"), nil)
		return status == http.StatusUnauthorized
	})
	if status, _ := dialStatus(t, wsURL(s, "/evil"), http.Header{"Origin": {"https://evil.example"}}); status != http.StatusForbidden {
		t.Errorf("a bad Origin: %d, want 403", status)
	}
	if r := get(t, s.URL+"/plain"); r.Status != 200 || !strings.HasPrefix(string(r.Body), "http") {
		t.Errorf("a plain request beside the WebSockets: %d %q", r.Status, r.Body)
	}
	if got := ann.ask("echo:still here"); got != "still here" {
		t.Errorf("ann after the refusals: %q", got)
	}
	// An event stream needs the front: PHP says so instead of an empty 200.
	if r := get(t, s.URL+"/events?ch="+ch); r.Status != http.StatusInternalServerError {
		t.Errorf("EventStream::subscribe() in direct mode: %d %q %v, want 500", r.Status, r.Body, r.Header)
	}
	s.log.waitFor(t, "EventStream::subscribe\\(\\) needs the server's front", 10*time.Second)
}

// TestDirectWebSocketSurvivesResetAndKill: the daemon holds direct mode's WebSockets, so a
// `peregrine reset` and a kill -9 of every worker close none of them.
func TestDirectWebSocketSurvivesResetAndKill(t *testing.T) {
	admin := freeAddr(t)
	cfg, closes := directWSConfig(t, "admin:\n  address: "+admin+"\n")
	survivesResetAndKill(t, startServer(t, cfg), admin, closes)
}

// fdCount is the number of fds process pid has open.
func fdCount(t *testing.T, pid int) int {
	t.Helper()
	e, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	return len(e)
}

// TestDirectWebSocketNoFdLeak: 500 connections that open and close, leave in the middle of
// the upgrade's head, right after it, during onOpen, or are refused, leave the daemon and
// every worker with the fds they began with.
func TestDirectWebSocketNoFdLeak(t *testing.T) {
	cfg, _ := directWSConfig(t, "")
	s := startServer(t, cfg)
	addr := strings.TrimPrefix(s.URL, "http://")
	dialWS(t, wsURL(s, "/warm"), nil).ask("echo:x") // the hub's and handoff's lazily opened fds
	_ = get(t, s.URL+"/warm")
	daemon := s.cmd.Process.Pid
	start := map[int]int{}
	for _, pid := range processesTagged(s.tag) {
		start[pid] = fdCount(t, pid)
	}
	if len(start) < 3 {
		t.Fatalf("the daemon and 2 workers: found %v", start)
	}
	head := "GET /leak HTTP/1.1\r\nHost: " + addr + "\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
	raw := func(s string) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = c.Write([]byte(s))
		_ = c.Close()
	}
	for i := range 500 {
		switch i % 5 {
		case 0: // open and close cleanly
			c, _, err := gorilla.DefaultDialer.Dial(wsURL(s, "/c"), nil)
			if err != nil {
				t.Fatalf("cycle %d: %v", i, err)
			}
			_ = c.WriteMessage(gorilla.CloseMessage, gorilla.FormatCloseMessage(1000, ""))
			_ = c.Close()
		case 1: // mid-head: the worker still holds it
			raw(head)
		case 2: // the whole head, then gone at once: in flight to the daemon, or in onOpen
			raw(head + "\r\n")
		case 3: // gone during onOpen
			raw(strings.Replace(head, "/leak", "/leak?sleep=20", 1) + "\r\n")
		case 4: // refused by the hub (Origin)
			if status, _ := dialStatus(t, wsURL(s, "/o"), http.Header{"Origin": {"https://evil.example"}}); status != http.StatusForbidden {
				t.Fatalf("cycle %d: a bad Origin got %d", i, status)
			}
		}
	}
	eventually(t, 30*time.Second, "the fds back to their start", func() bool {
		for pid, n := range start {
			if got := fdCount(t, pid); got > n {
				t.Logf("pid %d (daemon: %t): %d fds, began with %d", pid, pid == daemon, got, n)
				return false
			}
		}
		return true
	})
	for _, pid := range processesTagged(s.tag) {
		if _, ok := start[pid]; !ok {
			t.Errorf("worker %d is new: a worker was replaced during the cycles", pid)
		}
	}
}

// TestDirectWebSocketsCappedByMaxConnections: in direct mode, with websocket.max_connections
// unset, http.max_connections caps the WebSockets the daemon takes over from the workers, as
// the front's listener caps them in proxied mode (40 were open at once with a cap of 4).
func TestDirectWebSocketsCappedByMaxConnections(t *testing.T) {
	cfg, _ := wsConfig(t, "native", "http:\n  direct: true\n  max_connections: 3\n")
	s := startServer(t, cfg)
	for i := range 3 {
		dialWS(t, wsURL(s, fmt.Sprintf("/c%d", i)), nil)
	}
	if status, body := dialStatus(t, wsURL(s, "/over"), nil); status != http.StatusServiceUnavailable {
		t.Errorf("past http.max_connections: %d %q, want 503", status, body)
	}
}

// TestDirectWebSocketEventWorkersListed: `peregrine workers` lists the workers that run the
// WebSocket events in direct mode, once they run, as their own group after the server's, and
// /ready still counts only the server's own.
func TestDirectWebSocketEventWorkersListed(t *testing.T) {
	admin := freeAddr(t)
	cfg, _ := directWSConfig(t, "admin:\n  address: "+admin+"\n")
	s := startServer(t, cfg)
	groups := func() map[string]int {
		var ws []struct {
			PID   int    `json:"pid"`
			State string `json:"state"`
			Group string `json:"group"`
		}
		r := get(t, "http://"+admin+"/workers")
		if err := json.Unmarshal(r.Body, &ws); r.Status != 200 || err != nil {
			t.Fatalf("/workers: %d %s (%v)", r.Status, r.Body, err)
		}
		n := map[string]int{}
		for _, w := range ws {
			if w.PID != 0 {
				n[w.Group]++
			}
		}
		return n
	}
	if n := groups(); n[""] != 2 || n["websocket"] != 0 {
		t.Errorf("before any event: workers by group %v, want 2 of the server's and none for events", n)
	}
	c := dialWS(t, wsURL(s, "/c?user=ann"), nil)
	pid := c.ask("pid") // runs on an event worker
	if n := groups(); n[""] != 2 || n["websocket"] != 2 {
		t.Errorf("workers by group %v, want 2 of the server's and the 2 event workers (one is %s)", n, pid)
	}
	if r := get(t, "http://"+admin+"/ready"); !strings.Contains(string(r.Body), "of 2 workers") {
		t.Errorf("/ready: %s", r.Body)
	}
}

// TestWebSocketOpeningAtTheStop: a server told to stop while a connection's onOpen runs waits
// for it, in proxied and in direct mode: the connection opens, its first frame is the 1001
// close, and onClose hears it. In direct mode the handed-over upgrade's server was closed
// before the hub, which cancelled the onOpen and dropped the client with no close and no onClose.
func TestWebSocketOpeningAtTheStop(t *testing.T) {
	for _, direct := range []bool{false, true} {
		t.Run(fmt.Sprintf("direct=%t", direct), func(t *testing.T) {
			cfg, closes := wsConfig(t, "native", "")
			if direct {
				cfg, closes = directWSConfig(t, "")
			}
			s := startServer(t, cfg)
			hold := filepath.Join(t.TempDir(), "release")
			type dialed struct {
				c   *gorilla.Conn
				err error
			}
			dial := make(chan dialed, 1)
			go func() {
				c, _, err := gorilla.DefaultDialer.Dial(wsURL(s, "/x?user=opening&hold="+hold), nil)
				dial <- dialed{c, err}
			}()
			eventually(t, 30*time.Second, "onOpen begun", func() bool {
				_, err := os.Stat(hold + ".began")
				return err == nil
			})
			s.signal(syscall.SIGTERM)
			s.log.waitFor(t, "stopping", 30*time.Second)
			if err := os.WriteFile(hold, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			d := <-dial
			if d.err != nil {
				t.Fatalf("the connection opening at the stop: %v", d.err)
			}
			ws := &wsClient{t: t, c: d.c}
			t.Cleanup(func() { _ = d.c.Close() })
			if code := ws.closed(); code != gorilla.CloseGoingAway {
				t.Errorf("closed with %d, want 1001", code)
			}
			if code := s.wait(t, 60*time.Second); code != 0 {
				t.Errorf("exit %d", code)
			}
			if log := readFile(closes); !strings.Contains(log, ` 1001 server stopping {"user":"opening"`) {
				t.Errorf("onClose at the stop:\n%s", log)
			}
		})
	}
}
