// Command wslib measures the two WebSocket libraries Peregrine could build on
// (github.com/coder/websocket and github.com/gorilla/websocket) the way the daemon would use
// them: a net/http server that holds each connection with one reading goroutine. It reports
// the server's RSS growth per idle connection and echo round trips a second (docs/websocket.md).
//
//	go run ./bench/cmd/wslib -conns 10000 -echo 50
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	coder "github.com/coder/websocket"
	gorilla "github.com/gorilla/websocket"
)

func main() {
	serve := flag.String("serve", "", "internal: serve with this library (coder|gorilla) on -addr")
	addr := flag.String("addr", "127.0.0.1:0", "internal: the address to serve on")
	conns := flag.Int("conns", 10000, "idle connections to hold")
	echo := flag.Int("echo", 50, "connections echoing in the throughput pass")
	dur := flag.Duration("for", 3*time.Second, "length of the throughput pass")
	flag.Parse()
	if *serve != "" {
		runServer(*serve, *addr)
		return
	}
	for _, lib := range []string{"coder", "gorilla"} {
		perConn, rate, err := measure(lib, *conns, *echo, *dur)
		if err != nil {
			fmt.Fprintln(os.Stderr, lib+":", err)
			os.Exit(1)
		}
		fmt.Printf("%-8s %6.1f KiB/idle connection  %8.0f echoes/s (%d connections)\n", lib, perConn/1024, rate, *echo)
	}
}

var held atomic.Int64

func runServer(lib, addr string) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		panic(err)
	}
	fmt.Println(ln.Addr().String())
	var up gorilla.Upgrader
	http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/count":
			debug.FreeOSMemory()
			fmt.Fprint(w, held.Load())
			return
		}
		held.Add(1)
		defer held.Add(-1)
		if lib == "coder" {
			c, err := coder.Accept(w, r, &coder.AcceptOptions{InsecureSkipVerify: true})
			if err != nil {
				return
			}
			c.SetReadLimit(1 << 20)
			ctx := context.Background()
			for {
				t, b, err := c.Read(ctx)
				if err != nil {
					return
				}
				if err := c.Write(ctx, t, b); err != nil {
					return
				}
			}
		}
		c, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		for {
			t, b, err := c.ReadMessage()
			if err != nil {
				return
			}
			if err := c.WriteMessage(t, b); err != nil {
				return
			}
		}
	}))
}

func rss(pid int) int64 {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "VmRSS:") {
			f := strings.Fields(l)
			n, _ := strconv.ParseInt(f[1], 10, 64)
			return n * 1024
		}
	}
	return 0
}

func count(addr string) int64 {
	resp, err := http.Get("http://" + addr + "/count")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	var n int64
	fmt.Fscan(resp.Body, &n)
	return n
}

func measure(lib string, conns, echo int, dur time.Duration) (float64, float64, error) {
	self, _ := os.Executable()
	cmd := exec.Command(self, "-serve", lib)
	out, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return 0, 0, err
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	var line [64]byte
	n, _ := out.Read(line[:])
	addr := strings.TrimSpace(string(line[:n]))
	count(addr)
	before := rss(cmd.Process.Pid)
	ctx := context.Background()
	var open []*gorilla.Conn
	for i := 0; i < conns; i++ {
		c, _, err := gorilla.DefaultDialer.DialContext(ctx, "ws://"+addr+"/", nil)
		if err != nil {
			return 0, 0, fmt.Errorf("dial %d: %w", i, err)
		}
		open = append(open, c)
	}
	for deadline := time.Now().Add(30 * time.Second); count(addr) < int64(conns+1) && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(time.Second)
	count(addr)
	after := rss(cmd.Process.Pid)
	for _, c := range open {
		_ = c.Close()
	}
	var total atomic.Int64
	var wg sync.WaitGroup
	stop := time.Now().Add(dur)
	msg := []byte(strings.Repeat("x", 64))
	for i := 0; i < echo; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, _, err := gorilla.DefaultDialer.DialContext(ctx, "ws://"+addr+"/", nil)
			if err != nil {
				return
			}
			defer c.Close()
			for time.Now().Before(stop) {
				if c.WriteMessage(gorilla.TextMessage, msg) != nil {
					return
				}
				if _, _, err := c.ReadMessage(); err != nil {
					return
				}
				total.Add(1)
			}
		}()
	}
	wg.Wait()
	return float64(after-before) / float64(conns), float64(total.Load()) / dur.Seconds(), nil
}
