package integration

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// A request's bytes have one owner (issue 25, items 1 and 2; docs/protocol.md, "Who owns a
// request's bytes"): the exchange that writes a request to PHP owns its frame and its body until
// its writer is done and the request has ended, however early its client got the answer. These
// tests attack that: scripts that answer first and read their body after, with bodies around
// the pipe's size (64 KiB), the in-memory limit (128 KiB) and beyond, behind large heads, from
// many clients at once. With `go test -tags poison` every buffer the server releases is
// overwritten first (make test runs them so).

// lateBody is one request of TestLateBodyReadsGetTheirOwnBody: its body and the file its
// script writes the length and hash of the body it read.
type lateBody struct {
	body []byte
	out  string
}

// TestLateBodyReadsGetTheirOwnBody: every script reads its body after its answer
// (fastcgi_finish_request()) and records its length and hash; each must be exactly its own body.
// The exchange returned early while its writer still wrote the frame and the handler released
// the frame's buffer and closed the body's file: a script read another client's bytes, and every
// body kept in a file was cut short (or hung until exec_timeout).
func TestLateBodyReadsGetTheirOwnBody(t *testing.T) {
	t.Parallel()
	s := startServer(t, "workers:\n  command: php "+fixture(t, "exchange.php")+"\n  runtime: native\n  count: 4\n  exec_timeout: 120s\n")
	dir := t.TempDir()
	sizes := []int{64<<10 - 1, 64 << 10, 64<<10 + 1, 128<<10 - 1, 128 << 10, 128<<10 + 1, 1 << 20}
	pad := strings.Repeat("h", 6<<10) // four of them (a line holds at most 8 KiB): a head of about 24 KiB
	const clients = 12
	var (
		mu   sync.Mutex
		sent []lateBody
		wg   sync.WaitGroup
	)
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(c), 25))
			for i, size := range sizes {
				for _, bigHead := range []bool{false, true} {
					body := make([]byte, size)
					for j := range body {
						body[j] = byte(rng.Uint32())
					}
					out := filepath.Join(dir, fmt.Sprintf("c%d-%d-%v", c, i, bigHead))
					headers := []string{"Content-Type", "application/octet-stream"}
					if bigHead {
						headers = append(headers, "X-Pad-1", pad, "X-Pad-2", pad, "X-Pad-3", pad, "X-Pad-4", pad)
					}
					ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
					r, err := doErr(ctx, http.MethodPut, s.URL+"/finish-hash?ms="+fmt.Sprint(rng.IntN(3))+"&out="+out, bytes.NewReader(body), headers...)
					cancel()
					if err != nil || r.Status != 200 || string(r.Body) != "answered" {
						t.Errorf("PUT of %d bytes (big head %v): status %d, %q, %v", size, bigHead, r.Status, r.Body, err)
						return
					}
					mu.Lock()
					sent = append(sent, lateBody{body: body, out: out})
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	// Each script writes its file after its answer: wait for them all, or for the deadline.
	deadline := time.Now().Add(60 * time.Second)
	wrong := 0
	for _, lb := range sent {
		var got []byte
		for {
			b, err := os.ReadFile(lb.out)
			if err == nil {
				got = b
				break
			}
			if time.Now().After(deadline) {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		sum := sha256.Sum256(lb.body)
		want := fmt.Sprintf("%d %s", len(lb.body), hex.EncodeToString(sum[:]))
		if string(got) != want {
			wrong++
			if wrong <= 5 {
				t.Errorf("%s: the script read %q, want %q (its own body)", filepath.Base(lb.out), got, want)
			}
		}
	}
	if wrong > 0 {
		t.Errorf("%d of %d scripts did not read exactly their own body", wrong, len(sent))
	}
	if n := s.log.count(`worker failed`); n > 0 {
		t.Errorf("%d workers failed", n)
	}
}

// TestRefusedLargePutsKeepTheirWorker: a script that refuses a 300 KiB PUT without reading it
// (a framework's 405), with or without work after its answer, costs nothing more than its
// answer: the worker discards the body and serves on. It used to be taken out until
// exec_timeout (four such requests took four workers out for a minute).
func TestRefusedLargePutsKeepTheirWorker(t *testing.T) {
	t.Parallel()
	s := startServer(t, "workers:\n  command: php "+fixture(t, "exchange.php")+"\n  runtime: native\n  count: 1\n  exec_timeout: 120s\n")
	pid := string(get(t, s.URL+"/pid").Body)
	body := bytes.Repeat([]byte("r"), 300<<10)
	for _, target := range []string{"/refuse", "/refuse?finish=1", "/refuse?finish=1&ms=20", "/refuse"} {
		for range 2 {
			r := do(t, http.MethodPut, s.URL+target, bytes.NewReader(body), "Content-Type", "application/octet-stream")
			if r.Status != http.StatusMethodNotAllowed {
				t.Fatalf("PUT %s: status %d, want 405", target, r.Status)
			}
		}
		// Far below exec_timeout: a worker held by the refused body would not answer in time.
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		r, err := doErr(ctx, http.MethodGet, s.URL+"/pid", nil)
		cancel()
		if err != nil || r.Status != 200 || string(r.Body) != pid {
			t.Fatalf("after PUT %s: %d %q %v, want the same worker %s to answer", target, r.Status, r.Body, err, pid)
		}
	}
	if n := s.log.count(`worker failed|replacing worker`); n > 0 {
		t.Fatalf("%d workers replaced; log:\n%s", n, s.log.String())
	}
}
