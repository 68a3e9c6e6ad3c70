package integration

import (
	"bufio"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	gorilla "github.com/gorilla/websocket"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
)

// wsConfig serves testdata/workers/websocket.php with the given runtime and extra YAML; it
// returns the config and the file the fixture's onClose writes to.
func wsConfig(t *testing.T, runtime string, extra string) (string, string) {
	log := filepath.Join(t.TempDir(), "closes.log")
	return fmt.Sprintf("workers:\n  runtime: %s\n  command: php %s\n  count: 2\n  env: { WS_CLOSE_LOG: %s }\n%s",
		runtime, fixture(t, "websocket.php"), log, extra), log
}

// wsURL turns the server's http:// URL into a ws:// one for path.
func wsURL(s *server, path string) string { return "ws" + strings.TrimPrefix(s.URL, "http") + path }

// wsClient is a test's WebSocket connection.
type wsClient struct {
	t *testing.T
	c *gorilla.Conn
}

func dialWS(t *testing.T, url string, header http.Header) *wsClient {
	t.Helper()
	c, resp, err := gorilla.DefaultDialer.Dial(url, header)
	if err != nil {
		status := 0
		if resp != nil {
			status = resp.StatusCode
		}
		t.Fatalf("dial %s: %v (status %d)", url, err, status)
	}
	t.Cleanup(func() { _ = c.Close() })
	return &wsClient{t: t, c: c}
}

// dialStatus dials and returns the status of a refused upgrade (101 when it opened).
func dialStatus(t *testing.T, url string, header http.Header) (int, string) {
	t.Helper()
	c, resp, err := gorilla.DefaultDialer.Dial(url, header)
	if err == nil {
		_ = c.Close()
		return http.StatusSwitchingProtocols, ""
	}
	if resp == nil {
		t.Fatalf("dial %s: %v", url, err)
	}
	b := make([]byte, 512)
	n, _ := resp.Body.Read(b)
	return resp.StatusCode, string(b[:n])
}

func (w *wsClient) send(msg string) {
	w.t.Helper()
	if err := w.c.WriteMessage(gorilla.TextMessage, []byte(msg)); err != nil {
		w.t.Fatalf("send %q: %v", msg, err)
	}
}

// read returns the next message, within 10 s.
func (w *wsClient) read() string {
	w.t.Helper()
	_ = w.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, b, err := w.c.ReadMessage()
	if err != nil {
		w.t.Fatalf("read: %v", err)
	}
	return string(b)
}

func (w *wsClient) ask(msg string) string {
	w.t.Helper()
	w.send(msg)
	return w.read()
}

// closed waits for the server to close the connection and returns the close code.
func (w *wsClient) closed() int {
	w.t.Helper()
	_ = w.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		_, b, err := w.c.ReadMessage()
		if err == nil {
			w.t.Logf("before the close: %q", b)
			continue
		}
		if ce, ok := err.(*gorilla.CloseError); ok {
			return ce.Code
		}
		w.t.Fatalf("waiting for a close: %v", err)
	}
}

// TestWebSocketEvents runs the handshake and the three events on both runtimes: attributes
// travel and stay, one connection's events come in order and one at a time however many
// workers there are, Refused answers with its status, a throw in onMessage closes that
// connection with 1011 and no other, and onClose sees the attributes.
func TestWebSocketEvents(t *testing.T) {
	for _, tc := range []struct{ name, runtime, env, extra string }{
		{"cli", "cli", "", ""},
		{"native", "native", "", ""},
		{"native psr", "native", "WS_PSR: \"1\", ", ""},
		{"native concurrency", "native", "", "  concurrency: 4\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, closes := wsConfig(t, tc.runtime, "")
			cfg = strings.Replace(cfg, "env: { ", "env: { "+tc.env, 1)
			cfg = strings.Replace(cfg, "  count: 2\n", "  count: 2\n"+tc.extra, 1)
			s := startServer(t, cfg)
			a := dialWS(t, wsURL(s, "/chat?user=ann&hello=1"), nil)
			if got := a.read(); got != "hello ann" {
				t.Fatalf("a send from onOpen: %q", got)
			}
			if got := a.ask("echo:hi"); got != "hi" {
				t.Fatalf("echo: %q", got)
			}
			a.send("set:color=blue")
			var attrs map[string]any
			if err := json.Unmarshal([]byte(a.ask("attrs")), &attrs); err != nil {
				t.Fatal(err)
			}
			if attrs["user"] != "ann" || attrs["color"] != "blue" || attrs["path"] != "/chat" || attrs["n"] != float64(3) {
				t.Fatalf("attributes: %v", attrs)
			}

			// 200 messages without waiting: each event increments n; any two run side by
			// side on the two workers, or out of order, and the count breaks.
			b := dialWS(t, wsURL(s, "/b?user=bob"), nil)
			for i := range 200 {
				b.send("echo:" + strconv.Itoa(i))
			}
			for i := range 200 {
				if got := b.read(); got != strconv.Itoa(i) {
					t.Fatalf("message %d came back as %q", i, got)
				}
			}
			if err := json.Unmarshal([]byte(b.ask("attrs")), &attrs); err != nil || attrs["n"] != float64(201) {
				t.Fatalf("after 200 events in order: %v %v", attrs, err)
			}

			// Binary messages stay binary.
			if err := b.c.WriteMessage(gorilla.BinaryMessage, []byte("echo:\x00\xff")); err != nil {
				t.Fatal(err)
			}
			_ = b.c.SetReadDeadline(time.Now().Add(10 * time.Second))
			if typ, data, err := b.c.ReadMessage(); err != nil || typ != gorilla.BinaryMessage || string(data) != "\x00\xff" {
				t.Fatalf("binary echo: %d %q %v", typ, data, err)
			}

			if status, body := dialStatus(t, wsURL(s, "/x?refuse=401"), nil); status != 401 || !strings.Contains(body, "refused by the fixture") {
				t.Errorf("Refused(401): %d %q", status, body)
			}
			if status, _ := dialStatus(t, wsURL(s, "/x?throw=1"), nil); status != 500 {
				t.Errorf("a throw in onOpen: %d, want 500", status)
			}
			s.log.waitFor(t, "onOpen failed for WebSocket connection", 10*time.Second)

			a.send("throw")
			if code := a.closed(); code != gorilla.CloseInternalServerErr {
				t.Errorf("a throw in onMessage closed with %d, want 1011", code)
			}
			s.log.waitFor(t, "onMessage failed for WebSocket connection .*onMessage threw", 10*time.Second)
			if got := b.ask("echo:still here"); got != "still here" {
				t.Errorf("the other connection after the throw: %q", got)
			}

			// An ordinary request with method WEBSOCKET is an ordinary request: without the
			// server's key nobody can forge an event.
			if r := do(t, "WEBSOCKET", s.URL+"/x", strings.NewReader(strings.Repeat("\x02", 100))); string(r.Body) != "http WEBSOCKET" {
				t.Errorf("a client's WEBSOCKET request: %d %q", r.Status, r.Body)
			}

			_ = b.c.WriteMessage(gorilla.CloseMessage, gorilla.FormatCloseMessage(4001, "done"))
			eventually(t, 10*time.Second, "onClose for both connections", func() bool {
				return strings.Count(readFile(closes), "\n") >= 2
			})
			log := readFile(closes)
			if !strings.Contains(log, " 1011 ") || !strings.Contains(log, " 4001 done ") || !strings.Contains(log, `"user":"bob"`) {
				t.Errorf("onClose log:\n%s", log)
			}
		})
	}
}

// readFile returns a file's content, empty if it cannot be read.
func readFile(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}

// TestWebSocketSurvivesResetAndKill: the server holds the connections, so `peregrine reset`
// and a kill -9 of every worker close none of them; the next event of each goes to a new
// worker, with its attributes, and a publish still reaches every member of the channel.
func TestWebSocketSurvivesResetAndKill(t *testing.T) {
	admin := freeAddr(t)
	cfg, closes := wsConfig(t, "cli", "admin:\n  address: "+admin+"\n")
	survivesResetAndKill(t, startServer(t, cfg), admin, closes)
}

// survivesResetAndKill holds 20 connections on s through a reset and a kill -9 of every
// worker: none closes, each keeps its attributes and channels, and new workers serve them.
func survivesResetAndKill(t *testing.T, s *server, admin, closes string) {
	const n = 20
	clients := make([]*wsClient, n)
	for i := range clients {
		clients[i] = dialWS(t, wsURL(s, fmt.Sprintf("/c?user=u%d&join=room-websocket", i)), nil)
	}
	before := map[string]bool{}
	for _, c := range clients {
		before[c.ask("pid")] = true
	}
	check := func(phase string) {
		t.Helper()
		var mu sync.Mutex
		var wg sync.WaitGroup
		pids := map[string]bool{}
		for i, c := range clients {
			wg.Go(func() {
				if got := c.ask("attrs"); !strings.Contains(got, fmt.Sprintf(`"user":"u%d"`, i)) {
					t.Errorf("%s: attributes of connection %d: %q", phase, i, got)
				}
				pid := c.ask("pid")
				mu.Lock()
				pids[pid] = true
				mu.Unlock()
			})
		}
		wg.Wait()
		for pid := range pids {
			if before[pid] {
				t.Errorf("%s: worker %s served before and after", phase, pid)
			}
		}
		if r := get(t, s.URL+"/publish?ch=room-websocket&msg="+phase); r.Status != 200 {
			t.Fatalf("publish: %d %s", r.Status, r.Body)
		}
		for i, c := range clients {
			if got := c.read(); got != phase {
				t.Errorf("%s: connection %d got %q from the publish", phase, i, got)
			}
		}
		before = pids
		if log := readFile(closes); log != "" {
			t.Fatalf("%s closed connections:\n%s", phase, log)
		}
	}

	if out, err := exec.Command(binary, "reset", "-c", writeAdminConfig(t, admin)).CombinedOutput(); err != nil {
		t.Fatalf("peregrine reset: %v\n%s", err, out)
	}
	s.log.waitFor(t, "all workers replaced", 60*time.Second)
	check("reset")

	for _, pid := range processesTagged(s.tag) {
		if pid != s.cmd.Process.Pid {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	check("kill")
}

// TestWebSocketOrigin: a browser's upgrade from another site gets 403 before PHP runs (cross-
// site WebSocket hijacking); the request's own host, allowed_origins and clients that send no
// Origin pass. Classic mode refuses the websocket section at start.
func TestWebSocketOrigin(t *testing.T) {
	cfg, _ := wsConfig(t, "cli", "websocket:\n  allowed_origins: [\"https://app.example\", cdn.example]\n")
	s := startServer(t, cfg)
	host := strings.TrimPrefix(s.URL, "http://")
	for _, tc := range []struct {
		origin string
		want   int
	}{
		{"", 101},
		{"http://" + host, 101},
		{"https://app.example", 101},
		{"http://cdn.example", 101},
		{"https://evil.example", 403},
		{"https://app.example.evil.example", 403},
		{"null", 403},
	} {
		h := http.Header{}
		if tc.origin != "" {
			h.Set("Origin", tc.origin)
		}
		if got, body := dialStatus(t, wsURL(s, "/o"), h); got != tc.want {
			t.Errorf("Origin %q: %d %q, want %d", tc.origin, got, body, tc.want)
		}
	}

	c := launch(t, "http:\n  root: "+t.TempDir()+"\nworkers:\n  runtime: native\nwebsocket:\n  broker: redis://127.0.0.1:6379\n")
	if code := c.wait(t, 30*time.Second); code != 1 || !strings.Contains(c.log.String(), "WebSockets need worker mode") {
		t.Errorf("classic mode with a websocket section: exit %d, log:\n%s", code, c.log.String())
	}
}

// dialSlow opens a connection whose client never reads, with a small receive buffer, so that
// what the server sends piles up in its send queue.
func dialSlow(t *testing.T, url string) *gorilla.Conn {
	t.Helper()
	d := gorilla.Dialer{NetDial: func(network, addr string) (net.Conn, error) {
		c, err := net.Dial(network, addr)
		if err == nil {
			_ = c.(*net.TCPConn).SetReadBuffer(4096)
		}
		return c, err
	}}
	c, _, err := d.Dial(url, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestWebSocketLimits: a message over max_message_size closes its connection with 1009 (one
// at the limit passes); a client that does not read is closed with 1008 once its send queue is
// full, while a reader on the same channel gets every message; past websocket.max_connections
// an upgrade gets 503; and a peer that answers no ping is closed after two intervals, while
// one that reads stays.
func TestWebSocketLimits(t *testing.T) {
	const limit = 64 << 10
	cfg, closes := wsConfig(t, "cli", "websocket:\n  max_message_size: 64KiB\n  send_queue: 256KiB\n  max_connections: 3\n")
	s := startServer(t, cfg)

	big := dialWS(t, wsURL(s, "/big"), nil)
	at := "echo:" + strings.Repeat("m", limit-len("echo:"))
	if got := big.ask(at); len(got) != limit-len("echo:") {
		t.Fatalf("a message of exactly max_message_size came back with %d bytes", len(got))
	}
	big.send(at + "m")
	if code := big.closed(); code != gorilla.CloseMessageTooBig {
		t.Errorf("a message one byte over max_message_size closed with %d, want 1009", code)
	}

	// onClose ran: the connection is gone, and the cap counts the three below.
	eventually(t, 10*time.Second, "onClose of the 1009", func() bool { return strings.Contains(readFile(closes), " 1009 ") })

	// A text message that is not UTF-8 fails the connection (RFC 6455 8.1) and never reaches
	// onMessage: gorilla does not check, the hub does.
	bad := dialWS(t, wsURL(s, "/utf8"), nil)
	bad.send("echo:\xff\xfe")
	if code := bad.closed(); code != gorilla.CloseInvalidFramePayloadData {
		t.Errorf("a text message that is not UTF-8 closed with %d, want 1007", code)
	}
	eventually(t, 10*time.Second, "onClose of the 1007", func() bool { return strings.Contains(readFile(closes), " 1007 ") })
	reader := dialWS(t, wsURL(s, "/r?join=flood-websocket"), nil)
	dialSlow(t, wsURL(s, "/s?join=flood-websocket"))
	dialWS(t, wsURL(s, "/k"), nil)
	if status, body := dialStatus(t, wsURL(s, "/over"), nil); status != http.StatusServiceUnavailable {
		t.Errorf("past websocket.max_connections: %d %q, want 503", status, body)
	}

	// 160 messages of 48 KiB: 7.5 MiB, past what the kernel buffers and the 256 KiB queue hold.
	msg := strings.Repeat("f", 48<<10)
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := range 160 {
			// 48 KiB is past what a request line may hold (414): the message is the body.
			r, err := http.Post(s.URL+"/publish?ch=flood-websocket", "text/plain", strings.NewReader(strconv.Itoa(i%10)+msg))
			if err != nil {
				t.Errorf("publish %d: %v", i, err)
				return
			}
			_ = r.Body.Close()
			if r.StatusCode != 200 {
				t.Errorf("publish %d: %d", i, r.StatusCode)
				return
			}
		}
	})
	for i := range 160 {
		if got := reader.read(); len(got) != len(msg)+1 || got[0] != byte('0'+i%10) {
			t.Fatalf("the reader's message %d: %d bytes starting %q", i, len(got), got[:1])
		}
	}
	wg.Wait()
	eventually(t, 10*time.Second, "the client that does not read closed with 1008", func() bool {
		return strings.Contains(readFile(closes), " 1008 send queue full")
	})

	// Pings every 2 s: a reader answers each within the interval (4 s of silence close a peer),
	// however loaded the machine.
	ps, psCloses := wsConfig(t, "cli", "websocket:\n  ping_interval: 2s\n")
	p := startServer(t, ps)
	dialSlow(t, wsURL(p, "/silent"))
	alive := dialWS(t, wsURL(p, "/alive"), nil)
	done := make(chan struct{})
	go func() { // reading answers the pings, until the test closes the connection below
		defer close(done)
		_ = alive.c.SetReadDeadline(time.Now().Add(time.Minute))
		_, _, _ = alive.c.ReadMessage()
	}()
	defer func() { t.Logf("closes: %s", readFile(psCloses)) }()
	eventually(t, 30*time.Second, "the silent peer closed", func() bool {
		return strings.Contains(readFile(psCloses), " 1006 no answer to pings")
	})
	alive2 := dialWS(t, wsURL(p, "/alive2"), nil)
	if got := alive2.ask("echo:x"); got != "x" {
		t.Fatal(got)
	}
	if n := strings.Count(readFile(psCloses), "\n"); n != 1 {
		t.Errorf("closes after the ping timeout (want only the silent one):\n%s", readFile(psCloses))
	}
	_ = alive.c.Close()
	<-done
}

// TestWebSocketSendAndChannels: Connection::join/leave/close and Peregrine\WebSocket::send,
// publish and close, from events and from ordinary requests.
func TestWebSocketSendAndChannels(t *testing.T) {
	cfg, closes := wsConfig(t, "cli", "")
	s := startServer(t, cfg)
	a := dialWS(t, wsURL(s, "/a?join=room-websocket"), nil)
	b := dialWS(t, wsURL(s, "/b"), nil)
	if got := b.ask("join:room-websocket"); got != "joined room-websocket" {
		t.Fatal(got)
	}
	aID, bID := a.ask("id"), b.ask("id")
	get(t, s.URL+"/publish?ch=room-websocket&msg=one")
	if a.read() != "one" || b.read() != "one" {
		t.Fatal("a publish missed a member")
	}
	if got := b.ask("leave:room-websocket"); got != "left room-websocket" {
		t.Fatal(got)
	}
	a.send("pub:room-websocket:two") // from an event
	if got := a.read(); got != "two" {
		t.Fatal(got)
	}
	if got := b.ask("echo:nothing before this"); got != "nothing before this" {
		t.Errorf("b left the channel but got %q", got)
	}
	a.send("sendto:" + bID + ":from a")
	if got := b.read(); got != "from a" {
		t.Errorf("WebSocket::send from an event: %q", got)
	}
	if r := get(t, s.URL+"/send?id="+aID+"&msg=from+http"); r.Status != 200 || a.read() != "from http" {
		t.Errorf("WebSocket::send from a request: %d", r.Status)
	}
	if r := get(t, s.URL+"/send?id=nobody.1&msg=x"); r.Status != 200 {
		t.Errorf("a send to a connection that is gone: %d %s", r.Status, r.Body)
	}
	if r := get(t, s.URL+"/close?id="+aID+"&code=1006"); r.Status != 500 {
		t.Errorf("WebSocket::close with 1006, a code no endpoint may send: %d, want the exception's 500", r.Status)
	}
	s.log.waitFor(t, "not a close code a server may send", 10*time.Second)
	get(t, s.URL+"/close?id="+aID+"&code=4002")
	if code := a.closed(); code != 4002 {
		t.Errorf("WebSocket::close: %d", code)
	}
	b.send("close:4003")
	if code := b.closed(); code != 4003 {
		t.Errorf("Connection::close: %d", code)
	}
	eventually(t, 10*time.Second, "both onClose", func() bool { return strings.Count(readFile(closes), "\n") == 2 })
	if log := readFile(closes); !strings.Contains(log, aID+" 4002 ") || !strings.Contains(log, bID+" 4003 bye") {
		t.Errorf("onClose:\n%s", log)
	}
}

// TestWebSocketBroker: two servers on one Redis, then on one NATS: a publish on either reaches
// the members on both, and send and close by id reach a connection the other server holds.
func TestWebSocketBroker(t *testing.T) {
	for _, broker := range []string{"redis", "nats"} {
		t.Run(broker, func(t *testing.T) {
			url := "redis://127.0.0.1:6379"
			if broker == "nats" {
				ensureNATS(t)
				url = "nats://127.0.0.1:4222"
			} else {
				ensureRedis(t)
			}
			channel := "room-websocket-" + randomTag()
			cfg1, _ := wsConfig(t, "cli", "websocket:\n  broker: "+url+"\n")
			cfg2, closes2 := wsConfig(t, "cli", "websocket:\n  broker: "+url+"\n")
			s1, s2 := startServer(t, cfg1), startServer(t, cfg2)
			a := dialWS(t, wsURL(s1, "/a?join="+channel), nil)
			b := dialWS(t, wsURL(s2, "/b?join="+channel), nil)
			aID, bID := a.ask("id"), b.ask("id")
			if nodeA, nodeB, _ := strings.Cut(aID, "."); nodeA == strings.SplitN(bID, ".", 2)[0] || nodeB == "" {
				t.Fatalf("ids %s and %s do not say which server holds them", aID, bID)
			}
			for i, s := range []*server{s1, s2} {
				msg := fmt.Sprintf("from-server-%d", i+1)
				get(t, s.URL+"/publish?ch="+channel+"&msg="+msg)
				if got1, got2 := a.read(), b.read(); got1 != msg || got2 != msg {
					t.Errorf("publish on server %d: a got %q, b got %q", i+1, got1, got2)
				}
			}
			a.send("sendto:" + bID + ":across")
			if got := b.read(); got != "across" {
				t.Errorf("send(id) to the other server: %q", got)
			}
			get(t, s1.URL+"/close?id="+bID+"&code=4005")
			if code := b.closed(); code != 4005 {
				t.Errorf("close(id) on the other server: %d", code)
			}
			eventually(t, 10*time.Second, "onClose on server 2", func() bool { return strings.Contains(readFile(closes2), bID+" 4005") })

			// Event streams: a publish on server 1 reaches a subscriber on server 2, which
			// resumes on server 1 with the id server 2 gave it (the broker keeps the history).
			t.Cleanup(func() { // the channel's history
				if broker == "redis" {
					rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
					defer rdb.Close()
					rdb.Del(context.Background(), "peregrine:ws:history:"+channel)
					return
				}
				nc, err := nats.Connect(url)
				if err != nil {
					return
				}
				defer nc.Close()
				js, _ := jetstream.New(nc)
				if st, err := js.Stream(context.Background(), "PEREGRINE_WS_HISTORY"); err == nil {
					_ = st.Purge(context.Background(), jetstream.WithPurgeSubject("peregrine.ws.hist."+hex.EncodeToString([]byte(channel))))
				}
			})
			ev := openSubscription(t, s2.URL+"/events?ch="+channel, "")
			get(t, s1.URL+"/publish?ch="+channel+"&msg=seen")
			last, d := ev.next()
			if d != "seen" {
				t.Fatalf("the stream on server 2: %q", d)
			}
			// Both MS-SEQ: Redis's entry id, NATS's stream epoch and sequence.
			if !regexp.MustCompile(`^\d+-\d+$`).MatchString(last) {
				t.Errorf("event id %q: want the broker's history id, MS-SEQ", last)
			}
			_ = ev.body.Close()
			get(t, s1.URL+"/publish?ch="+channel+"&msg=missed-1")
			get(t, s2.URL+"/publish?ch="+channel+"&msg=missed-2")
			again := openSubscription(t, s1.URL+"/events?ch="+channel, last)
			get(t, s1.URL+"/publish?ch="+channel+"&msg=live")
			if got := again.data(3); got != "missed-1,missed-2,live" {
				t.Errorf("resumed after %s: %s", last, got)
			}
		})
	}
}

// TestWebSocketAdmin: peregrine websocket (text and --json) lists the open connections and
// channels, and /metrics has the connections, messages, closes by code and publishes.
func TestWebSocketAdmin(t *testing.T) {
	admin := freeAddr(t)
	cfg, _ := wsConfig(t, "cli", "admin:\n  address: "+admin+"\n")
	s := startServer(t, cfg)
	a := dialWS(t, wsURL(s, "/a?join=admin-websocket"), nil)
	b := dialWS(t, wsURL(s, "/b?join=admin-websocket"), nil)
	aID := a.ask("id")
	get(t, s.URL+"/publish?ch=admin-websocket&msg=x")
	a.read()
	b.read()
	b.send("close:4000")
	b.closed()
	eventually(t, 10*time.Second, "b gone", func() bool {
		out, _ := exec.Command(binary, "websocket", "-c", writeAdminConfig(t, admin), "--json").Output()
		var st struct {
			Connections int            `json:"connections"`
			Channels    map[string]int `json:"channels"`
			Open        []struct{ ID string }
			Closes      map[string]int `json:"closes"`
		}
		return json.Unmarshal(out, &st) == nil && st.Connections == 1 && st.Channels["admin-websocket"] == 1 &&
			len(st.Open) == 1 && st.Open[0].ID == aID && st.Closes["4000"] == 1
	})
	out, err := exec.Command(binary, "websocket", "-c", writeAdminConfig(t, admin)).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "admin-websocket") || !strings.Contains(string(out), aID) || !strings.Contains(string(out), "4000: 1") {
		t.Errorf("peregrine websocket: %v\n%s", err, out)
	}
	m := string(get(t, "http://"+admin+"/metrics").Body)
	for _, want := range []string{"peregrine_websocket_connections 1", `peregrine_websocket_closes_total{code="4000"} 1`,
		`peregrine_websocket_messages_total{direction="in"} 2`, "peregrine_websocket_publish_seconds_count 1", "peregrine_websocket_opened_total 2"} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// sseReader reads server-sent events.
type sseReader struct {
	t    *testing.T
	body io.ReadCloser
	r    *bufio.Reader
}

func openSubscription(t *testing.T, url, lastID string) *sseReader {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("event stream: %d %v", resp.StatusCode, resp.Header)
	}
	t.Cleanup(func() { _ = resp.Body.Close() })
	return &sseReader{t: t, body: resp.Body, r: bufio.NewReader(resp.Body)}
}

// next returns the next event's id and data (its data lines joined by newlines).
func (s *sseReader) next() (id, data string) {
	s.t.Helper()
	done := make(chan struct{})
	timer := time.AfterFunc(10*time.Second, func() { _ = s.body.Close() })
	defer timer.Stop()
	defer close(done)
	var lines []string
	for {
		line, err := s.r.ReadString('\n')
		if err != nil {
			s.t.Fatalf("reading the event stream: %v", err)
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case line == "" && lines != nil:
			return id, strings.Join(lines, "\n")
		case strings.HasPrefix(line, "id: "):
			id = line[4:]
		case strings.HasPrefix(line, "data: "):
			lines = append(lines, line[6:])
		}
	}
}

// data returns the data of the next n events, joined by commas.
func (s *sseReader) data(n int) string {
	s.t.Helper()
	got := make([]string, n)
	for i := range got {
		_, got[i] = s.next()
	}
	return strings.Join(got, ",")
}

// TestEventStream: EventStream::subscribe keeps the response open and writes each publish to
// its channels as an event with an id, a message with newlines as several data lines, beside
// WebSocket members of the same channel; a client that comes back with Last-Event-ID gets what
// it missed first, then the live messages. The worker is free meanwhile.
func TestEventStream(t *testing.T) {
	cfg, _ := wsConfig(t, "cli", "")
	s := startServer(t, strings.Replace(cfg, "  count: 2\n", "  count: 1\n", 1))
	ch := "sse-websocket-" + randomTag()
	ev := openSubscription(t, s.URL+"/events?ch="+ch+",other", "")
	ws := dialWS(t, wsURL(s, "/w?join="+ch), nil)
	// With one worker, this answer shows the stream holds none.
	if r := get(t, s.URL+"/publish?ch="+ch+"&msg=one"); r.Status != 200 {
		t.Fatal(r.Status)
	}
	get(t, s.URL+"/publish?ch="+ch+"&msg=two%0Alines")
	id1, d1 := ev.next()
	id2, d2 := ev.next()
	if d1 != "one" || d2 != "two\nlines" || id1 == "" || id1 == id2 {
		t.Fatalf("events: %q %q, %q %q", id1, d1, id2, d2)
	}
	if ws.read() != "one" || ws.read() != "two\nlines" {
		t.Fatal("the WebSocket member missed a publish")
	}
	_ = ev.body.Close()
	get(t, s.URL+"/publish?ch=other&msg=three")
	get(t, s.URL+"/publish?ch="+ch+"&msg=four")
	get(t, s.URL+"/publish?ch=unrelated&msg=no")
	again := openSubscription(t, s.URL+"/events?ch="+ch+",other", id2)
	get(t, s.URL+"/publish?ch="+ch+"&msg=five")
	if got := again.data(3); got != "three,four,five" {
		t.Errorf("resumed after %s: %s, want three, four, five", id2, got)
	}
}

// TestChatExample runs examples/chat as its README says, with two clients in place of two
// browsers: each sees the other's messages, and a reset in between leaves both connected.
func TestChatExample(t *testing.T) {
	admin := freeAddr(t)
	chat, _ := filepath.Abs("../examples/chat/worker.php")
	s := startServer(t, "workers:\n  command: php "+chat+"\n  count: 2\nadmin:\n  address: "+admin+"\n")
	if r := get(t, s.URL+"/"); r.Status != 200 || !strings.Contains(string(r.Body), "new WebSocket(") {
		t.Fatalf("the page: %d", r.Status)
	}
	if status, _ := dialStatus(t, wsURL(s, "/chat?name="), nil); status != 400 {
		t.Errorf("no name: %d, want 400", status)
	}
	ann := dialWS(t, wsURL(s, "/chat?name=ann"), nil)
	bob := dialWS(t, wsURL(s, "/chat?name=bob"), nil)
	text := func(c *wsClient) string {
		var m struct{ From, Text string }
		if err := json.Unmarshal([]byte(c.read()), &m); err != nil {
			t.Fatal(err)
		}
		return m.From + ": " + m.Text
	}
	// onOpen publishes before its join applies (when it returns): each sees only the other join.
	if got := text(ann); got != "*: bob joined" {
		t.Fatal(got)
	}
	for i, phase := range []string{"before", "after"} {
		if i == 1 {
			if out, err := exec.Command(binary, "reset", "-c", writeAdminConfig(t, admin)).CombinedOutput(); err != nil {
				t.Fatalf("peregrine reset: %v\n%s", err, out)
			}
		}
		ann.send("hello " + phase)
		if a, b := text(ann), text(bob); a != "ann: hello "+phase || b != a {
			t.Errorf("%s the reset: ann saw %q, bob %q", phase, a, b)
		}
		bob.send("hi " + phase)
		if a, b := text(ann), text(bob); a != "bob: hi "+phase || b != a {
			t.Errorf("%s the reset: ann saw %q, bob %q", phase, a, b)
		}
	}
}

// TestWebSocketClientsLeave: a client that leaves at each phase (during onOpen, while its
// message runs, with messages still unread by the server, without a close frame) gets exactly
// one onClose, after the events that began, and the server holds nothing of it afterwards; the
// race detector watches the daemon all along.
func TestWebSocketClientsLeave(t *testing.T) {
	admin := freeAddr(t)
	cfg, closes := wsConfig(t, "cli", "admin:\n  address: "+admin+"\n")
	s := startServer(t, cfg)

	// During onOpen: the upgrade never completes; onOpen had accepted, so onClose follows.
	raw, err := net.Dial("tcp", strings.TrimPrefix(s.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(raw, "GET /open?sleep=300&user=gone-in-open HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
	time.Sleep(50 * time.Millisecond) // onOpen has begun
	_ = raw.Close()

	// While its message runs, and with more messages sent behind it.
	busy := dialWS(t, wsURL(s, "/busy?user=gone-in-message"), nil)
	busy.send("sleep:300")
	busy.send("echo:unread")
	_ = busy.c.UnderlyingConn().Close()

	// Without a close frame, idle.
	idle := dialWS(t, wsURL(s, "/idle?user=gone-idle"), nil)
	idle.ask("echo:x")
	_ = idle.c.UnderlyingConn().Close()

	eventually(t, 15*time.Second, "three onClose", func() bool { return strings.Count(readFile(closes), "\n") >= 3 })
	log := readFile(closes)
	for _, user := range []string{"gone-in-open", "gone-in-message", "gone-idle"} {
		if n := strings.Count(log, `"user":"`+user+`"`); n != 1 || !strings.Contains(log, " 1006 ") {
			t.Errorf("%s: %d onClose:\n%s", user, n, log)
		}
	}
	if !strings.Contains(log, `"user":"gone-in-message","path":"\/busy","n":`) {
		t.Errorf("onClose of the busy connection:\n%s", log)
	}
	eventually(t, 10*time.Second, "no connection held", func() bool {
		out, _ := exec.Command(binary, "websocket", "-c", writeAdminConfig(t, admin), "--json").Output()
		return strings.Contains(string(out), `"connections": 0`) || strings.Contains(string(out), `"connections":0`)
	})
	time.Sleep(200 * time.Millisecond)
	if n := strings.Count(readFile(closes), "\n"); n != 3 {
		t.Errorf("%d onClose, want 3:\n%s", n, readFile(closes))
	}
	if strings.Contains(s.log.String(), "DATA RACE") {
		t.Errorf("the race detector spoke:\n%s", s.log.String())
	}
}

// TestEventStreamClosedByServer: WebSocket::close(id) on an event stream and the server's
// stop end the stream cleanly, with no WebSocket close frame written into it as an event; at
// the stop a WebSocket closes with 1001 and gets its onClose before the workers go.
func TestEventStreamClosedByServer(t *testing.T) {
	admin := freeAddr(t)
	cfg, closes := wsConfig(t, "cli", "admin:\n  address: "+admin+"\n")
	s := startServer(t, cfg)
	ch := "sse-close-websocket-" + randomTag()
	ev := openSubscription(t, s.URL+"/events?ch="+ch, "")
	var id string
	eventually(t, 10*time.Second, "the stream listed", func() bool {
		out, _ := exec.Command(binary, "websocket", "-c", writeAdminConfig(t, admin), "--json").Output()
		var st struct{ Open []struct{ ID string } }
		if json.Unmarshal(out, &st) != nil || len(st.Open) != 1 {
			return false
		}
		id = st.Open[0].ID
		return true
	})
	get(t, s.URL+"/publish?ch="+ch+"&msg=before")
	if _, d := ev.next(); d != "before" {
		t.Fatal(d)
	}
	get(t, s.URL+"/close?id="+id)
	rest, err := io.ReadAll(ev.r)
	if err != nil || len(rest) != 0 {
		t.Errorf("after WebSocket::close: %q %v, want the end of the stream", rest, err)
	}

	again := openSubscription(t, s.URL+"/events?ch="+ch, "")
	ws := dialWS(t, wsURL(s, "/stop?user=at-stop"), nil)
	s.signal(syscall.SIGTERM)
	if code := ws.closed(); code != gorilla.CloseGoingAway {
		t.Errorf("a WebSocket at the server's stop closed with %d, want 1001", code)
	}
	rest, err = io.ReadAll(again.r)
	if err != nil || len(rest) != 0 {
		t.Errorf("at the server's stop: %q %v, want the end of the stream", rest, err)
	}
	if code := s.wait(t, 30*time.Second); code != 0 {
		t.Errorf("exit %d", code)
	}
	if log := readFile(closes); !strings.Contains(log, ` 1001 server stopping {"user":"at-stop"`) {
		t.Errorf("onClose at the stop:\n%s", log)
	}
}

// TestWebSocketOriginBehindProxy: behind a trusted proxy (http.trusted_proxies) the Origin is
// checked against the forwarded host, the one the browser's page came from, as PHP sees it;
// the proxied Host header no longer passes, and a client that is not a trusted proxy cannot
// pass its Origin by sending X-Forwarded-Host itself.
func TestWebSocketOriginBehindProxy(t *testing.T) {
	cfg, _ := wsConfig(t, "cli", "http:\n  trusted_proxies: [127.0.0.1/32]\n")
	s := startServer(t, cfg)
	host := strings.TrimPrefix(s.URL, "http://")
	cfg, _ = wsConfig(t, "cli", "http:\n  trusted_proxies: [10.0.0.0/8]\n")
	untrusted := startServer(t, cfg)
	for _, tc := range []struct {
		s              *server
		origin, fwHost string
		want           int
	}{
		{s, "https://app.public.example", "app.public.example", 101},
		{s, "https://app.public.example:8443", "app.public.example:8443", 101},
		{s, "http://" + host, "app.public.example", 403}, // the proxy's Host, not the page's
		{s, "https://evil.example", "app.public.example", 403},
		{s, "http://" + host, "", 101}, // a trusted peer that forwards no host: its Host
		{untrusted, "https://app.public.example", "app.public.example", 403},
		{untrusted, "http://" + strings.TrimPrefix(untrusted.URL, "http://"), "app.public.example", 101},
	} {
		h := http.Header{"X-Forwarded-For": {"203.0.113.7"}}
		if tc.fwHost != "" {
			h.Set("X-Forwarded-Host", tc.fwHost)
		}
		h.Set("Origin", tc.origin)
		if got, body := dialStatus(t, wsURL(tc.s, "/o"), h); got != tc.want {
			t.Errorf("Origin %q, X-Forwarded-Host %q (trusted: %t): %d %q, want %d",
				tc.origin, tc.fwHost, tc.s == s, got, body, tc.want)
		}
	}
}

// TestEventStreamConnectionCap: event-stream subscribers and WebSockets share
// websocket.max_connections: past it both a subscription and an upgrade get 503, and the place
// a subscriber leaves is free again.
func TestEventStreamConnectionCap(t *testing.T) {
	cfg, _ := wsConfig(t, "cli", "websocket:\n  max_connections: 2\n")
	s := startServer(t, cfg)
	ch := "cap-websocket2-" + randomTag()
	first := openSubscription(t, s.URL+"/events?ch="+ch, "")
	dialWS(t, wsURL(s, "/w?join="+ch), nil)
	r, err := http.Get(s.URL + "/events?ch=" + ch)
	if err != nil {
		t.Fatal(err)
	}
	_ = r.Body.Close()
	if r.StatusCode != http.StatusServiceUnavailable || r.Header.Get("Retry-After") == "" {
		t.Errorf("a subscription past websocket.max_connections: %d %v, want 503", r.StatusCode, r.Header)
	}
	if status, body := dialStatus(t, wsURL(s, "/over"), nil); status != http.StatusServiceUnavailable {
		t.Errorf("an upgrade past websocket.max_connections: %d %q, want 503", status, body)
	}
	_ = first.body.Close()
	eventually(t, 10*time.Second, "the subscriber's place freed", func() bool {
		c, _, err := gorilla.DefaultDialer.Dial(wsURL(s, "/again"), nil)
		if err == nil {
			_ = c.Close()
		}
		return err == nil
	})
	get(t, s.URL+"/publish?ch="+ch+"&msg=x") // the stream's goroutine writes, sees the client gone
}

// TestAnEventOnAWorkerThatExitsIsRetried: with workers.concurrency above 1, an event whose
// worker ended because another event on it exit()ed (or hit a fatal error) runs again on
// another worker, as one whose worker was killed does: only the connection whose event ended
// the worker is affected. It closed the other connection with 1011 (a review found it).
func TestAnEventOnAWorkerThatExitsIsRetried(t *testing.T) {
	log := filepath.Join(t.TempDir(), "closes.log")
	s := startServer(t, fmt.Sprintf("workers:\n  runtime: native\n  command: php %s\n  count: 1\n  concurrency: 4\n  env: { WS_CLOSE_LOG: %s }\n",
		fixture(t, "websocket.php"), log))
	a := dialWS(t, wsURL(s, "/a"), nil)
	b := dialWS(t, wsURL(s, "/b"), nil)
	a.send("sleep:1500")
	time.Sleep(300 * time.Millisecond) // A's event has begun (were it not, it is retried all the same)
	b.send("exit")
	if got := a.read(); got != "slept" {
		t.Errorf("A's event, whose worker ended under it: %q, want slept", got)
	}
	if got := a.ask("echo:still here"); got != "still here" {
		t.Errorf("A after the retry: %q", got)
	}
}
