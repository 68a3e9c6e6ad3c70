package main

import (
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// The front scenario (issue 11): what Peregrine does in front of PHP, against nginx doing the
// same: hello world over HTTPS and HTTP/2, a compressed 20 KB HTML page, and static files.

// acceptAll is the Accept-Encoding of the compressed page, as a current browser sends it.
const acceptAll = "gzip, br, zstd"

// frontScenario measures the HTTP front. Each cell's systems are started once and alternated
// run by run, as everywhere else.
func (l *lab) frontScenario(p plan) ([]*comparison, error) {
	w := p.frontWorkers
	var out []*comparison

	// a. Hello world over HTTPS + HTTP/2: h2load when installed, else wrk over HTTPS/1.1.
	hasH2load := true
	if _, err := exec.LookPath("h2load"); err != nil {
		hasH2load = false
		logf("front: h2load not found (apt-get install nghttp2-client): HTTPS hello measured over HTTP/1.1 with wrk")
	}
	servers, err := l.startAll(
		func() (*server, error) {
			return l.startPeregrineWith(sysRaw, peregrineOptions{script: "bench/apps/hello/raw.php", workers: w, tls: true})
		},
		func() (*server, error) {
			return l.startFPM(sysFPM, fpmOptions{docroot: "bench/apps/hello", workers: w, backlog: fpmBacklog, tls: true})
		},
	)
	if err != nil {
		return nil, err
	}
	load := func(s *server, d time.Duration) (result, error) {
		if hasH2load {
			return runH2load(l.ctx, s.url, p.h2Clients, p.h2Streams, d)
		}
		return runWrk(l.ctx, s.url, p.frontConns, d)
	}
	c := newComparison(p.runs, w, p.h2Clients*p.h2Streams, fmt.Sprintf("h2load -t%d -c%d -m%d -D %d (HTTP/2 over TLS)",
		min(wrkThreads, p.h2Clients), p.h2Clients, p.h2Streams, int(p.frontDur.Seconds())))
	c.app = "hello world, HTTPS + HTTP/2"
	if !hasH2load {
		c.conns = p.frontConns
		c.load = fmt.Sprintf("wrk -t%d -c%d -d%s (HTTPS, HTTP/1.1: h2load not installed)", wrkThreads, p.frontConns, p.frontDur)
		c.app = "hello world, HTTPS (HTTP/1.1)"
	}
	if err := l.frontCell(c, servers, "", func(s *server) error { _, err := load(s, p.warmup); return err },
		func(s *server) (result, error) { return load(s, p.frontDur) }); err != nil {
		return nil, err
	}
	l.stopAllServers(servers)
	out = append(out, c)

	// b. A 20 KB HTML page made by PHP, compressed by the server: Peregrine's default
	// http.compression against nginx's gzip at level 5, Peregrine's gzip level. With a browser's
	// Accept-Encoding each server picks its best coding (zstd for Peregrine); with gzip only,
	// both do the same work.
	servers, err = l.startAll(
		func() (*server, error) {
			return l.startPeregrine(sysPeregr, "bench/apps/front/worker.php", w, nil)
		},
		func() (*server, error) {
			return l.startFPM(sysFPM, fpmOptions{docroot: "bench/apps/front", workers: w, backlog: fpmBacklog, gzip: true})
		},
	)
	if err != nil {
		return nil, err
	}
	for _, accept := range []string{acceptAll, "gzip"} {
		header := "Accept-Encoding: " + accept
		c := newComparison(p.runs, w, p.frontConns, fmt.Sprintf("wrk -t%d -c%d -d%s -H '%s'", wrkThreads, p.frontConns, p.frontDur, header))
		c.app = "20 KB HTML page from PHP, Accept-Encoding: " + accept
		err := l.frontCell(c, servers, accept, func(s *server) error {
			_, err := runWrk(l.ctx, s.url, p.frontConns, p.warmup, header)
			return err
		}, func(s *server) (result, error) {
			return runWrk(l.ctx, s.url, p.frontConns, p.frontDur, header)
		})
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	l.stopAllServers(servers)

	// c. Static files: the same page as a file, and 1 MB of incompressible bytes, from
	// Peregrine's http.root (a worker running, no PHP involved) and from nginx alone.
	static, err := l.writeStaticFiles()
	if err != nil {
		return nil, err
	}
	servers, err = l.startAll(
		func() (*server, error) {
			return l.startPeregrineWith(sysPeregr, peregrineOptions{script: "bench/apps/hello/raw.php", root: static, workers: w, path: "/page.html"})
		},
		func() (*server, error) { return l.startNginxStatic(sysNginx, static, "/page.html") },
	)
	if err != nil {
		return nil, err
	}
	for _, f := range []struct{ path, what string }{{"/page.html", "static file, 20 KB (the page above)"}, {"/big.bin", "static file, 1 MB"}} {
		for _, s := range servers {
			s.url = withPath(s.url, f.path)
		}
		c := newComparison(p.runs, w, p.frontConns, fmt.Sprintf("wrk -t%d -c%d -d%s (keep-alive, no Accept-Encoding)", wrkThreads, p.frontConns, p.frontDur))
		c.app = f.what
		err := l.frontCell(c, servers, "", func(s *server) error {
			_, err := runWrk(l.ctx, s.url, p.frontConns, p.warmup)
			return err
		}, func(s *server) (result, error) {
			return runWrk(l.ctx, s.url, p.frontConns, p.frontDur)
		})
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	l.stopAllServers(servers)
	return out, nil
}

// frontCell records one answer of each server (protocol, size, coding), then compares them;
// it stops the servers on an error (the caller stops them otherwise, when it is done with them).
func (l *lab) frontCell(c *comparison, servers []*server, accept string, before func(*server) error, measure func(*server) (result, error)) error {
	logf("front: %s, %d workers, %s", c.app, c.workers, c.load)
	for _, s := range servers {
		a, err := l.answer(s.url, accept)
		if err != nil {
			l.stopAllServers(servers)
			return fmt.Errorf("%s: %w", s.name, err)
		}
		c.answers = append(c.answers, a)
	}
	if err := l.compare(c, servers, before, measure); err != nil {
		l.stopAllServers(servers)
		return err
	}
	return nil
}

// answer describes the server's answer to one GET of url: the protocol, the body's bytes as
// sent and its Content-Encoding.
func (l *lab) answer(u, accept string) (string, error) {
	req, err := http.NewRequestWithContext(l.ctx, http.MethodGet, u, nil)
	if err != nil {
		return "", err
	}
	if accept != "" {
		req.Header.Set("Accept-Encoding", accept)
	}
	resp, err := l.client(10 * time.Second).Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: status %d", u, resp.StatusCode)
	}
	a := fmt.Sprintf("%s, %s B", resp.Proto, groupThousands(int(n)))
	if enc := resp.Header.Get("Content-Encoding"); enc != "" {
		a += " " + enc
	}
	return a, nil
}

// get returns the body of a GET of u.
func (l *lab) get(u string) (string, error) {
	req, err := http.NewRequestWithContext(l.ctx, http.MethodGet, u, nil)
	if err != nil {
		return "", err
	}
	resp, err := l.client(10 * time.Second).Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("status %d", resp.StatusCode)
	}
	return string(b), err
}

func withPath(u, path string) string {
	p, err := url.Parse(u)
	if err != nil {
		return u
	}
	p.Path = path
	return p.String()
}

// writeStaticFiles writes the static files' root into the lab's directory: page.html, the 20 KB
// page PHP makes in the page cell (rendered once by PHP), and big.bin, 1 MB of random bytes.
func (l *lab) writeStaticFiles() (string, error) {
	dir := filepath.Join(l.tmp, "static")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	page, err := l.php(nil, "-r", `require "bench/apps/front/page.php"; echo front_page();`)
	if err != nil {
		return "", fmt.Errorf("rendering the page: %w\n%s", err, page)
	}
	if err := os.WriteFile(filepath.Join(dir, "page.html"), []byte(page), 0o644); err != nil {
		return "", err
	}
	big := make([]byte, 1<<20)
	r := rand.NewChaCha8([32]byte{'p', 'e', 'r', 'e', 'g', 'r', 'i', 'n', 'e'})
	_, _ = r.Read(big)
	return dir, os.WriteFile(filepath.Join(dir, "big.bin"), big, 0o644)
}
