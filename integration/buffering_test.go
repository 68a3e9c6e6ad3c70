package integration

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// What the server holds for slow clients and queued bodies (issue 9, findings 4 and 5).

// daemonRSS returns the server process's resident memory in bytes.
func daemonRSS(t *testing.T, s *server) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

// TestSlowReadersHoldNeitherWorkersNorMemory: clients that ask for 8 MB and never read used to
// keep the whole answer in the daemon and stay connected forever. Now the answer waits in a
// temporary file, the worker is free at once, and the clients are dropped at write_timeout.
func TestSlowReadersHoldNeitherWorkersNorMemory(t *testing.T) {
	t.Parallel()
	s := startServer(t, "http:\n  write_timeout: 2s\nworkers:\n  command: php "+fixture(t, "app.php")+"\n  count: 1\n")
	before, filesBefore := daemonRSS(t, s), openFiles(t, s)
	const clients = 20
	conns := make([]net.Conn, 0, clients)
	for range clients {
		c, err := net.Dial("tcp", strings.TrimPrefix(s.URL, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetReadBuffer(4096)
		}
		conns = append(conns, c)
		if _, err := io.WriteString(c, "GET /big?mb=8 HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
	}
	// The single worker answers everyone, so it is free while they do not read.
	for i := range clients {
		r := get(t, s.URL+"/pid")
		if r.Status != 200 {
			t.Fatalf("request %d while %d clients stall: %d", i, clients, r.Status)
		}
	}
	if grew := daemonRSS(t, s) - before; grew > 100<<20 {
		t.Errorf("the daemon grew by %d MiB for %d stalled 8 MB answers", grew>>20, clients)
	}
	// Each stalled client is dropped at write_timeout: the daemon's descriptors go back to what
	// they were before the clients came (their sockets and the answers' temporary files closed).
	eventually(t, 60*time.Second, "the stalled clients are dropped", func() bool {
		return openFiles(t, s) <= filesBefore+2
	})
	for _, c := range conns {
		c.Close()
	}
}

// openFiles counts the daemon's open file descriptors.
func openFiles(t *testing.T, s *server) int {
	t.Helper()
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", s.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	return len(fds)
}

// TestQueuedBodiesWaitOnDisk: 30 POSTs of 4 MiB queued behind a busy worker used to sit in the
// daemon's memory (2 GB for 100 x 8 MiB); now they wait in temporary files, and all are served.
func TestQueuedBodiesWaitOnDisk(t *testing.T) {
	t.Parallel()
	s := startServer(t, "workers:\n  command: php "+fixture(t, "app.php")+"\n  count: 1\n")
	before := daemonRSS(t, s)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); get(t, s.URL+"/sleep?ms=1500") }()
	body := bytes.Repeat([]byte("b"), 4<<20)
	var peak int64
	var mu sync.Mutex
	for range 30 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e := echo(t, do(t, http.MethodPost, s.URL+"/echo", bytes.NewReader(body)))
			if e.BodyLength != len(body) {
				t.Errorf("body of %d bytes arrived as %d", len(body), e.BodyLength)
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for waiting := true; waiting; {
		select {
		case <-done:
			waiting = false
		case <-time.After(50 * time.Millisecond):
			rss := daemonRSS(t, s)
			mu.Lock()
			peak = max(peak, rss)
			mu.Unlock()
		}
	}
	if grew := peak - before; grew > 100<<20 {
		t.Errorf("the daemon grew by %d MiB while 30 x 4 MiB bodies waited", grew>>20)
	}
}

// TestRefusedBeforeTheBody: a request that would get 503 gets it before the server reads its
// body, so a client that sent Expect: 100-continue never sends the body.
func TestRefusedBeforeTheBody(t *testing.T) {
	t.Parallel()
	admin := freeAddr(t)
	s := startServer(t, "workers:\n  command: php "+fixture(t, "app.php")+"\n  count: 1\n  max_queue: 1\nadmin:\n  address: "+admin+"\n")
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Add(2)
	go func() { defer wg.Done(); get(t, s.URL+"/sleep?ms=3000") }()
	eventually(t, 20*time.Second, "the worker is busy", func() bool {
		return metric(t, "http://"+admin, `peregrine_workers{state="busy"}`) == 1
	})
	go func() { defer wg.Done(); get(t, s.URL+"/sleep?ms=10") }() // fills the queue
	eventually(t, 20*time.Second, "a request waits", func() bool {
		return metric(t, "http://"+admin, "peregrine_pool_queue_depth") == 1
	})
	c, err := net.Dial("tcp", strings.TrimPrefix(s.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.WriteString(c, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\nExpect: 100-continue\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("status %d (a 100 Continue means the server asked for a body it will refuse)", resp.StatusCode)
	}
}
