package httpserver

import (
	"bytes"
	"crypto/sha256"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// gateConn is the far side of a coalesceConn in tests: it records what each Write sends, and
// its first Write waits until gate is closed, after saying so on entered.
type gateConn struct {
	net.Conn // nil: only Write, Close, SetWriteDeadline are used
	entered  chan struct{}
	gate     chan struct{}
	fail     error // every Write fails with it when set

	mu     sync.Mutex
	writes [][]byte
}

func newGateConn() *gateConn {
	return &gateConn{entered: make(chan struct{}), gate: make(chan struct{})}
}

func (g *gateConn) Write(p []byte) (int, error) {
	g.mu.Lock()
	first := len(g.writes) == 0
	g.writes = append(g.writes, bytes.Clone(p))
	g.mu.Unlock()
	if first {
		close(g.entered)
		<-g.gate
	}
	if g.fail != nil {
		return 0, g.fail
	}
	return len(p), nil
}

func (g *gateConn) Close() error                     { return nil }
func (g *gateConn) SetWriteDeadline(time.Time) error { return nil }

func (g *gateConn) sent() (n int, all []byte) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.writes), bytes.Join(g.writes, nil)
}

// TestCoalesceGathersWhatIsWrittenDuringASend: while one send is under way, writes only wait
// in the buffer, and the next send takes all of them, in order.
func TestCoalesceGathersWhatIsWrittenDuringASend(t *testing.T) {
	g := newGateConn()
	c := coalesceWrites(g)
	var want bytes.Buffer
	write := func(s string) {
		t.Helper()
		if n, err := c.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", s, n, err)
		}
		want.WriteString(s)
	}
	write("first")
	<-g.entered // the flusher is sending "first"
	for i := range 100 {
		write("frame " + strconv.Itoa(i) + ";")
	}
	close(g.gate)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	n, all := g.sent()
	if n != 2 || !bytes.Equal(all, want.Bytes()) {
		t.Errorf("%d sends of %q, want 2 sends of %q", n, all, want.Bytes())
	}
	if _, err := c.Write([]byte("late")); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Write after Close: %v, want net.ErrClosed", err)
	}
}

// TestCoalesceHoldsWritersBackDuringASlowSend: past coalesceMax waiting bytes a writer waits for
// the send under way, as it would wait for a client that reads slowly without coalescing.
func TestCoalesceHoldsWritersBackDuringASlowSend(t *testing.T) {
	g := newGateConn()
	c := coalesceWrites(g)
	if _, err := c.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	<-g.entered
	piece := bytes.Repeat([]byte("y"), 1000)
	done := make(chan int)
	go func() {
		n := 0
		for n < coalesceMax+len(piece) {
			m, err := c.Write(piece)
			if err != nil {
				break
			}
			n += m
		}
		done <- n
	}()
	select {
	case n := <-done:
		t.Fatalf("%d bytes written while a send was stuck, past coalesceMax (%d)", n, coalesceMax)
	case <-time.After(100 * time.Millisecond):
		// Not a timing assertion: only that the writer did not get past the limit meanwhile.
	}
	close(g.gate)
	var n int
	select {
	case n = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the writer still waits after the send ended")
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, all := g.sent(); len(all) != 1+n {
		t.Errorf("%d bytes sent, want %d", len(all), 1+n)
	}
}

// TestCoalesceSendErrorIsKept: a send that fails fails the writes after it, and Close does not
// wait for anything.
func TestCoalesceSendErrorIsKept(t *testing.T) {
	g := newGateConn()
	g.fail = errors.New("connection reset by peer")
	c := coalesceWrites(g)
	if _, err := c.Write([]byte("a")); err != nil {
		t.Fatal(err)
	}
	<-g.entered
	close(g.gate)
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := c.Write([]byte("b"))
		if errors.Is(err, g.fail) {
			break
		}
		if err != nil || time.Now().After(deadline) {
			t.Fatalf("Write after a failed send: %v, want %v", err, g.fail)
		}
		time.Sleep(time.Millisecond)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
}

// tcpPair returns both ends of a loopback TCP connection.
func tcpPair(t *testing.T) (server, client net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server, err = ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = server.Close(); _ = client.Close() })
	return server, client
}

// TestCoalesceKeepsEachWriteWhole: writers of every size around the thresholds, at once, on a
// real socket: each write arrives whole and each writer's writes arrive in order, and Close
// sends what was still buffered before the connection ends.
func TestCoalesceKeepsEachWriteWhole(t *testing.T) {
	server, client := tcpPair(t)
	c := coalesceWrites(server)
	sizes := []int{1, 9, 100, 4 << 10, coalesceNow - 1, coalesceNow, coalesceNow + 1, coalesceMax - 1,
		coalesceMax, coalesceMax + 1, 3 * coalesceMax, 1 << 20}
	const rounds = 20
	got := make(chan map[int]int, 1)
	go func() { got <- readRecords(t, client) }()
	var wg sync.WaitGroup
	for w, size := range sizes {
		wg.Go(func() {
			for seq := range rounds {
				if _, err := c.Write(record(w, seq, size)); err != nil {
					t.Errorf("writer %d: %v", w, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	counts := <-got
	for w := range sizes {
		if counts[w] != rounds {
			t.Errorf("writer %d (%d B): %d records arrived, want %d", w, sizes[w], counts[w], rounds)
		}
	}
}

// record is a write of size bytes (at least the 12-byte head): its length, writer and sequence
// number, and a body derived from them.
func record(writer, seq, size int) []byte {
	b := make([]byte, max(size, 12))
	binary.BigEndian.PutUint32(b, uint32(len(b)))
	binary.BigEndian.PutUint32(b[4:], uint32(writer))
	binary.BigEndian.PutUint32(b[8:], uint32(seq))
	sum := sha256.Sum256(b[:12])
	for i := 12; i < len(b); i++ {
		b[i] = sum[i%len(sum)]
	}
	return b
}

// readRecords reads records until EOF and counts them by writer, failing the test on a torn or
// out-of-order record.
func readRecords(t *testing.T, r io.Reader) map[int]int {
	counts := map[int]int{}
	head := make([]byte, 12)
	for {
		if _, err := io.ReadFull(r, head); err != nil {
			if err != io.EOF {
				t.Errorf("read: %v", err)
			}
			return counts
		}
		size := int(binary.BigEndian.Uint32(head))
		w, seq := int(binary.BigEndian.Uint32(head[4:])), int(binary.BigEndian.Uint32(head[8:]))
		b := make([]byte, size)
		copy(b, head)
		if _, err := io.ReadFull(r, b[12:]); err != nil {
			t.Errorf("read: %v", err)
			return counts
		}
		if !bytes.Equal(b, record(w, seq, size)) || seq != counts[w] {
			t.Errorf("writer %d: record %d torn or out of order (expected %d)", w, seq, counts[w])
			return counts
		}
		counts[w]++
	}
}

// TestCoalesceCloseGivesUpOnAClientThatDoesNotRead: Close waits at most closeTimeout for a
// client that reads nothing, the writers stuck behind it fail, and no goroutine is left.
func TestCoalesceCloseGivesUpOnAClientThatDoesNotRead(t *testing.T) {
	before := runtime.NumGoroutine()
	server, _ := tcpPair(t)
	c := coalesceWrites(server).(*coalesceConn)
	c.closeTimeout = 200 * time.Millisecond
	piece := make([]byte, 1000)
	var written atomic.Int64
	stuck := make(chan error)
	go func() {
		for {
			if _, err := c.Write(piece); err != nil {
				stuck <- err
				return
			}
			written.Add(int64(len(piece)))
		}
	}()
	// Wait until the socket's buffers are full: a send is under way and nothing more goes in.
	deadline := time.Now().Add(20 * time.Second)
	for last := int64(-1); ; {
		time.Sleep(100 * time.Millisecond)
		c.mu.Lock()
		sending := c.sending
		c.mu.Unlock()
		n := written.Load()
		if sending && n == last {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the writer never filled the connection")
		}
		last = n
	}
	closed := make(chan error)
	go func() { closed <- c.Close() }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close waits for a client that does not read")
	}
	select {
	case err := <-stuck:
		if err == nil {
			t.Error("the stuck writer got no error")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the stuck writer was not released by Close")
	}
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines left, %d before", runtime.NumGoroutine(), before)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestHTTP2AnswersCoalesced: many streams at once over HTTP/2, over TLS and cleartext, with
// answers of sizes around the coalescing thresholds, all arrive whole.
func TestHTTP2AnswersCoalesced(t *testing.T) {
	sized := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.URL.Query().Get("n"))
		_, _ = w.Write(record(n, n, n))
	})
	dir := t.TempDir()
	roots, certFile, keyFile := testCertificate(t, dir)
	for _, tc := range []struct {
		name string
		tls  *TLSOptions
		p    func(*http.Protocols)
	}{
		{"TLS", &TLSOptions{CertFile: certFile, KeyFile: keyFile}, func(p *http.Protocols) { p.SetHTTP2(true) }},
		{"h2c", nil, func(p *http.Protocols) { p.SetUnencryptedHTTP2(true) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Listen("127.0.0.1:0", sized, ServerOptions{ReadHeaderTimeout: 5 * time.Second, IdleTimeout: 5 * time.Second, TLS: tc.tls})
			if err != nil {
				t.Fatal(err)
			}
			serve(t, s)
			p := new(http.Protocols)
			tc.p(p)
			tr := &http.Transport{Protocols: p, TLSClientConfig: &tls.Config{RootCAs: roots}}
			t.Cleanup(tr.CloseIdleConnections)
			client := &http.Client{Transport: tr, Timeout: 30 * time.Second}
			sizes := []int{12, 100, 4 << 10, coalesceNow - 9, coalesceNow, coalesceMax + 1, 300 << 10}
			var wg sync.WaitGroup
			for i := range 120 {
				n := sizes[i%len(sizes)]
				wg.Go(func() {
					resp, err := client.Get(fmt.Sprintf("%s/?n=%d", s.URL(), n))
					if err != nil {
						t.Errorf("n=%d: %v", n, err)
						return
					}
					body, err := io.ReadAll(resp.Body)
					_ = resp.Body.Close()
					if err != nil || resp.ProtoMajor != 2 || !bytes.Equal(body, record(n, n, n)) {
						t.Errorf("n=%d: %s, %d bytes, %v: torn or wrong", n, resp.Proto, len(body), err)
					}
				})
			}
			wg.Wait()
		})
	}
}

// TestCoalescedSendsKeepTheirWritersDeadlines: net/http's WriteByteTimeout sets a deadline
// before each Write and clears it when the Write returns, which with coalescing is once the
// bytes are copied. The send of those bytes, in the background, then had no deadline: to a
// client that reads nothing it failed only at Close's closeTimeout (here an hour), and until
// then held the connection. Now a send ends at the deadline of its bytes, and a writer waiting
// for room at its own, whatever the sizes of the writes.
func TestCoalescedSendsKeepTheirWritersDeadlines(t *testing.T) {
	for _, size := range []int{1, coalesceNow - 1, coalesceNow, coalesceMax, coalesceMax + 1, 1 << 20} {
		for _, writes := range []int{1, 3} {
			t.Run(fmt.Sprintf("%dx%d", writes, size), func(t *testing.T) {
				server, client := net.Pipe() // nobody reads client
				c := coalesceWrites(server).(*coalesceConn)
				c.closeTimeout = time.Hour
				t.Cleanup(func() { _ = client.Close() })
				p := make([]byte, size)
				for range writes {
					_ = c.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
					_, err := c.Write(p)
					_ = c.SetWriteDeadline(time.Time{})
					if err != nil {
						if !errors.Is(err, os.ErrDeadlineExceeded) {
							t.Fatalf("a write failed with %v, not its deadline", err)
						}
						break
					}
				}
				closed := make(chan struct{})
				go func() { _ = c.Close(); close(closed) }()
				select {
				case <-closed:
				case <-time.After(20 * time.Second):
					t.Fatal("Close still waits for a send whose deadline is long past")
				}
				if _, err := c.Write(p); err == nil {
					t.Fatal("a write after Close succeeded")
				}
			})
		}
	}
}

// TestCoalescedWriterWaitsForRoomUntilItsDeadline: a writer that finds coalesceMax bytes
// waiting behind a send that has no deadline (bytes written without one) leaves at its own.
func TestCoalescedWriterWaitsForRoomUntilItsDeadline(t *testing.T) {
	server, client := net.Pipe() // nobody reads client
	c := coalesceWrites(server).(*coalesceConn)
	t.Cleanup(func() { _ = client.Close(); _ = c.Close() })
	if _, err := c.Write([]byte{1}); err != nil { // its send waits for good
		t.Fatal(err)
	}
	for end := time.Now().Add(20 * time.Second); ; {
		c.mu.Lock()
		sending := c.sending
		c.mu.Unlock()
		if sending {
			break
		}
		if time.Now().After(end) {
			t.Fatal("the flusher never started its send")
		}
		runtime.Gosched()
	}
	failed := make(chan error, 1)
	go func() {
		p := make([]byte, coalesceMax)
		for {
			_ = c.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
			_, err := c.Write(p)
			_ = c.SetWriteDeadline(time.Time{})
			if err != nil {
				failed <- err
				return
			}
		}
	}()
	select {
	case err := <-failed:
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("the write failed with %v, not its deadline", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("a writer still waits for room, its deadline long past")
	}
}

// TestCloseKeepsTheDeadlineOfASendUnderWay: Close during a send keeps that send's own write
// deadline when it is earlier than the close's. It set the socket's deadline from the bytes
// still buffered (none), so the send under way waited the whole close timeout: a flake of
// TestCoalescedSendsKeepTheirWritersDeadlines on a loaded machine, where the flusher's send had
// begun before the test's Close.
func TestCloseKeepsTheDeadlineOfASendUnderWay(t *testing.T) {
	server, client := net.Pipe() // nobody reads client
	c := coalesceWrites(server).(*coalesceConn)
	c.closeTimeout = time.Hour
	t.Cleanup(func() { _ = client.Close() })
	_ = c.SetWriteDeadline(time.Now().Add(time.Second)) // long enough to find the send under way
	if _, err := c.Write([]byte{1}); err != nil {
		t.Fatal(err)
	}
	_ = c.SetWriteDeadline(time.Time{})
	for end := time.Now().Add(20 * time.Second); ; {
		c.mu.Lock()
		sending, err := c.sending, c.err
		c.mu.Unlock()
		if sending {
			break
		}
		if err != nil {
			t.Skip("the send failed before Close could find it under way")
		}
		if time.Now().After(end) {
			t.Fatal("the flusher never started its send")
		}
		runtime.Gosched()
	}
	closed := make(chan struct{})
	go func() { _ = c.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(20 * time.Second):
		t.Fatal("Close waits for a send whose own deadline is long past")
	}
}
