package integration

// The HTTP front end to end: h2c with prior knowledge, HTTPS from certificate files with HTTP/2
// by ALPN and the redirect listener, automatic certificates from a local ACME CA (Pebble),
// trusted proxies, and h2spec's conformance suite against the real binary, cleartext and TLS.
// Tools come from the module proxy through go.mod's tool directives (h2spec, pebble) and are
// built into the test's temporary directory; curl is used when installed.

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"encoding/xml"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// frontConfig runs testdata/workers/front.php, which says what PHP sees of the connection.
func frontConfig(t *testing.T, http string) string {
	return http + "workers:\n  command: php " + fixture(t, "front.php") + "\n  count: 1\n"
}

// needHTTPSBanner skips a test of an HTTPS server while the harness cannot read its banner
// (bannerRE must match https:// URLs); once it can, this does nothing and may be removed.
func needHTTPSBanner(t *testing.T) {
	t.Helper()
	if !bannerRE.MatchString("serving https://127.0.0.1:1 with 1 workers") {
		t.Skip("harness_test.go: bannerRE does not match https:// yet")
	}
}

// needClientInfo skips TestTrustedProxies while handler.go does not call clientInfo; once it
// does, this does nothing and may be removed.
func needClientInfo(t *testing.T) {
	t.Helper()
	src, err := os.ReadFile(filepath.Join("..", "internal", "httpserver", "handler.go"))
	if err == nil && !bytes.Contains(src, []byte("clientInfo(")) {
		t.Skip("internal/httpserver/handler.go does not call clientInfo yet")
	}
}

// seen is what front.php reports.
type seen struct {
	RemoteAddr string `json:"remoteAddr"`
	RemotePort int    `json:"remotePort"`
	Scheme     string `json:"scheme"`
	Host       string `json:"host"`
	Protocol   string `json:"protocol"`
	URI        string `json:"uri"`
}

// fetch GETs url with client and decodes front.php's answer; it returns the response too.
func fetch(t *testing.T, client *http.Client, url string, headers ...string) (*http.Response, seen) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Add(headers[i], headers[i+1])
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: reading the body: %v", url, err)
	}
	var s seen
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, body)
	}
	if err := json.Unmarshal(body, &s); err != nil {
		t.Fatalf("GET %s: %v in %q", url, err, body)
	}
	return resp, s
}

func protocols(h1, h2, h2c bool) *http.Protocols {
	p := new(http.Protocols)
	p.SetHTTP1(h1)
	p.SetHTTP2(h2)
	p.SetUnencryptedHTTP2(h2c)
	return p
}

func newClient(tr *http.Transport) *http.Client {
	return &http.Client{Timeout: 30 * time.Second, Transport: tr,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// TestH2C checks that the cleartext listener speaks HTTP/2 with prior knowledge beside
// HTTP/1.1, and that PHP is told which.
func TestH2C(t *testing.T) {
	s := startServer(t, frontConfig(t, ""))
	if !strings.HasPrefix(s.URL, "http://") {
		t.Fatalf("banner URL %s, want http://", s.URL)
	}

	h2c := newClient(&http.Transport{Protocols: protocols(false, false, true)})
	defer h2c.CloseIdleConnections()
	resp, got := fetch(t, h2c, s.URL+"/h2c?x=1")
	if resp.Proto != "HTTP/2.0" || got.Protocol != "HTTP/2.0" {
		t.Errorf("h2c: response %s, PHP saw %q; want HTTP/2.0 both", resp.Proto, got.Protocol)
	}
	if got.Scheme != "http" || got.URI != "/h2c?x=1" || got.RemoteAddr != "127.0.0.1" {
		t.Errorf("h2c: PHP saw %+v", got)
	}

	h1 := newClient(&http.Transport{Protocols: protocols(true, false, false)})
	defer h1.CloseIdleConnections()
	if resp, got := fetch(t, h1, s.URL+"/"); resp.Proto != "HTTP/1.1" || got.Protocol != "HTTP/1.1" {
		t.Errorf("HTTP/1.1: response %s, PHP saw %q", resp.Proto, got.Protocol)
	}

	// Many streams at once on one connection.
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := h2c.Get(s.URL + "/?size=" + strconv.Itoa(1000*i))
			if err != nil {
				errs <- err
				return
			}
			defer r.Body.Close()
			b, err := io.ReadAll(r.Body)
			if err == nil && (len(b) != 1000*i || r.ProtoMajor != 2) {
				err = fmt.Errorf("stream %d: %d bytes over %s", i, len(b), r.Proto)
			}
			if err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}

	if curl := curlPath(t); curl != "" {
		out := run(t, curl, "-sS", "--http2-prior-knowledge", "-o", "/dev/null", "-w", "%{http_version} %{http_code}", s.URL+"/")
		if out != "2 200" {
			t.Errorf("curl --http2-prior-knowledge: %q, want 2 200", out)
		}
	}
}

// TestHTTPSFromFiles serves HTTPS with a certificate from PEM files: HTTP/2 by ALPN, HTTP/1.1 for
// clients without it, curl, and the redirect listener.
func TestHTTPSFromFiles(t *testing.T) {
	needHTTPSBanner(t)
	dir := t.TempDir()
	ca := newTestCA(t)
	certFile, keyFile := ca.issue(t, dir, "localhost", "127.0.0.1")
	s := startServer(t, frontConfig(t, fmt.Sprintf("http:\n  tls:\n    cert: %s\n    key: %s\n    redirect_address: 127.0.0.1:0\n", certFile, keyFile)))
	if !strings.HasPrefix(s.URL, "https://") {
		t.Fatalf("banner URL %s, want https://", s.URL)
	}
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(s.URL, "https://"))
	base := "https://localhost:" + port
	dial := dialLoopback()

	h2 := newClient(&http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.pool}, DialContext: dial, ForceAttemptHTTP2: true})
	defer h2.CloseIdleConnections()
	resp, got := fetch(t, h2, base+"/secure?a=b")
	if resp.Proto != "HTTP/2.0" || resp.TLS == nil || resp.TLS.NegotiatedProtocol != "h2" {
		t.Errorf("HTTPS: %s, ALPN %q; want HTTP/2.0 over h2", resp.Proto, resp.TLS.NegotiatedProtocol)
	}
	if got.Scheme != "https" || got.Protocol != "HTTP/2.0" || got.Host != "localhost:"+port || got.URI != "/secure?a=b" {
		t.Errorf("HTTPS: PHP saw %+v", got)
	}

	h1 := newClient(&http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.pool}, DialContext: dial, Protocols: protocols(true, false, false)})
	defer h1.CloseIdleConnections()
	if resp, got := fetch(t, h1, base+"/"); resp.Proto != "HTTP/1.1" || got.Protocol != "HTTP/1.1" || got.Scheme != "https" {
		t.Errorf("HTTPS/1.1: %s, PHP saw %+v", resp.Proto, got)
	}

	// Cleartext HTTP on the TLS port is refused, not served.
	if r, err := client.Get("http://127.0.0.1:" + port + "/"); err == nil {
		r.Body.Close()
		if r.StatusCode != http.StatusBadRequest {
			t.Errorf("plain HTTP to the HTTPS port: %d, want 400", r.StatusCode)
		}
	}

	// The redirect listener sends every request to the HTTPS port, path and query kept.
	redirect := s.log.waitFor(t, `redirecting to https\W+address\W+[0-9.:]+`, 10*time.Second)
	redirect = redirect[strings.LastIndexAny(redirect, "= \"")+1:]
	req, _ := http.NewRequest(http.MethodPost, "http://"+redirect+"/login?next=%2Fhome", strings.NewReader("x=1"))
	req.Host = "localhost"
	r, err := newClient(&http.Transport{}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	if want := base + "/login?next=%2Fhome"; r.StatusCode != http.StatusPermanentRedirect || r.Header.Get("Location") != want {
		t.Errorf("redirect: %d to %q, want 308 to %q", r.StatusCode, r.Header.Get("Location"), want)
	}

	// A renewed certificate replaces the files: new handshakes get it, without a restart.
	serial := func() string {
		conn, err := tls.Dial("tcp", "127.0.0.1:"+port, &tls.Config{RootCAs: ca.pool, ServerName: "localhost"})
		if err != nil {
			t.Fatalf("TLS handshake: %v", err)
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].SerialNumber.String()
	}
	old := serial()
	renewedCert, renewedKey := ca.issue(t, t.TempDir(), "localhost", "127.0.0.1")
	for _, mv := range [][2]string{{renewedKey, keyFile}, {renewedCert, certFile}} {
		if err := os.Rename(mv[0], mv[1]); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 15*time.Second, "the renewed certificate to be served", func() bool { return serial() != old })
	s.log.waitFor(t, `certificate files reloaded`, 5*time.Second)

	if curl := curlPath(t); curl != "" {
		caFile := filepath.Join(dir, "ca.pem")
		if err := os.WriteFile(caFile, ca.pem, 0o644); err != nil {
			t.Fatal(err)
		}
		out := run(t, curl, "-sS", "--http2", "--cacert", caFile, "--resolve", "localhost:"+port+":127.0.0.1",
			"-o", "/dev/null", "-w", "%{http_version} %{http_code}", base+"/")
		if out != "2 200" {
			t.Errorf("curl --http2: %q, want 2 200", out)
		}
		out = run(t, curl, "-sS", "--http1.1", "--cacert", caFile, "--resolve", "localhost:"+port+":127.0.0.1",
			"-o", "/dev/null", "-w", "%{http_version} %{http_code}", base+"/")
		if out != "1.1 200" {
			t.Errorf("curl --http1.1: %q, want 1.1 200", out)
		}
	}
}

// TestBadCertificateFiles: a missing or mismatched certificate stops the start with the key named.
func TestBadCertificateFiles(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t)
	certFile, _ := ca.issue(t, dir, "localhost")
	_, otherKey := ca.issue(t, t.TempDir(), "localhost")
	for name, yaml := range map[string]string{
		"missing":    fmt.Sprintf("http:\n  tls:\n    cert: %s\n    key: %s\n", filepath.Join(dir, "nope.pem"), otherKey),
		"mismatched": fmt.Sprintf("http:\n  tls:\n    cert: %s\n    key: %s\n", certFile, otherKey),
	} {
		t.Run(name, func(t *testing.T) {
			s := launch(t, frontConfig(t, yaml))
			if code := s.wait(t, 30*time.Second); code == 0 {
				t.Errorf("peregrine exited 0")
			}
			if !strings.Contains(s.log.String(), "http.tls.cert") {
				t.Errorf("the error does not name http.tls.cert:\n%s", s.log.String())
			}
		})
	}
}

// TestTrustedProxies checks that X-Forwarded-* are believed from a trusted peer only. Both
// peers are on the loopback: 127.0.0.2 is trusted, 127.0.0.1 is not.
func TestTrustedProxies(t *testing.T) {
	needClientInfo(t)
	s := startServer(t, frontConfig(t, "http:\n  trusted_proxies: [127.0.0.2/32, \"::1\"]\n"))
	from := func(local string) *http.Client {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}}
		return newClient(&http.Transport{DialContext: d.DialContext})
	}
	headers := []string{"X-Forwarded-For", "10.9.9.9, 203.0.113.7", "X-Forwarded-Proto", "https", "X-Forwarded-Host", "www.example.com"}

	trusted := from("127.0.0.2")
	defer trusted.CloseIdleConnections()
	_, got := fetch(t, trusted, s.URL+"/", headers...)
	if got.RemoteAddr != "203.0.113.7" || got.Scheme != "https" || got.Host != "www.example.com" {
		t.Errorf("from a trusted proxy PHP saw %+v, want 203.0.113.7, https, www.example.com", got)
	}
	_, got = fetch(t, trusted, s.URL+"/", "Forwarded", `for="[2001:db8::7]:4711";proto=https;host=shop.example.com`)
	if got.RemoteAddr != "2001:db8::7" || got.Scheme != "https" || got.Host != "shop.example.com" {
		t.Errorf("Forwarded from a trusted proxy: PHP saw %+v", got)
	}

	untrusted := from("127.0.0.1")
	defer untrusted.CloseIdleConnections()
	_, got = fetch(t, untrusted, s.URL+"/", headers...)
	host := strings.TrimPrefix(s.URL, "http://")
	if got.RemoteAddr != "127.0.0.1" || got.Scheme != "http" || got.Host != host {
		t.Errorf("from an untrusted peer PHP saw %+v, want 127.0.0.1, http, %s", got, host)
	}
}

// TestH2Spec runs h2spec's whole suite (RFC 7540 and RFC 7541) against the real binary, over
// h2c and over TLS. Cases that fail because of net/http's HTTP/2 server, not Peregrine, are
// listed in h2specKnown with the reason (docs/http.md); any other failure fails the test, and so
// does a known one that starts passing, so that the list stays true.
func TestH2Spec(t *testing.T) {
	needHTTPSBanner(t)
	h2spec := buildTool(t, "github.com/summerwind/h2spec/cmd/h2spec")
	ca := newTestCA(t)
	certFile, keyFile := ca.issue(t, t.TempDir(), "localhost", "127.0.0.1")
	for _, mode := range []string{"h2c", "tls"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			cfg := ""
			if mode == "tls" {
				cfg = fmt.Sprintf("http:\n  tls:\n    cert: %s\n    key: %s\n", certFile, keyFile)
			}
			s := startServer(t, frontConfig(t, cfg))
			_, port, _ := net.SplitHostPort(s.URL[strings.Index(s.URL, "//")+2:])
			report := filepath.Join(t.TempDir(), "h2spec.xml")
			args := []string{"-h", "127.0.0.1", "-p", port, "-o", "3", "-j", report}
			if mode == "tls" {
				args = append(args, "-t", "-k")
			}
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			out, _ := exec.CommandContext(ctx, h2spec, args...).CombinedOutput() // exits 1 on any failure
			results, err := readH2SpecReport(report)
			if err != nil || len(results) < 140 {
				t.Fatalf("h2spec ran %d cases (%v); output:\n%s", len(results), err, out)
			}
			var failed []string
			for _, r := range results {
				why, known := h2specKnown[r.id]
				if known && (why.modes == "" || why.modes == mode) {
					if r.failure == "" {
						t.Errorf("h2spec %s (%s) now passes: remove it from h2specKnown and docs/http.md", r.id, r.name)
					}
					continue
				}
				if r.failure != "" {
					failed = append(failed, r.id)
					t.Errorf("h2spec %s: %s\n%s", r.id, r.name, r.failure)
				}
			}
			t.Logf("h2spec over %s: %d cases, %d unexpected failures", mode, len(results), len(failed))
		})
	}
}

// h2specKnown are the h2spec cases that net/http's HTTP/2 server fails on purpose or by design;
// docs/http.md explains each. modes limits a case to h2c or tls; empty means both.
var h2specKnown = map[string]struct{ modes, reason string }{
	// net/http advertises SETTINGS_MAX_FRAME_SIZE = 1 MiB, so h2spec's 20 KB HEADERS frame,
	// which assumes the 16 KiB default, is valid and gets an answer.
	"http2/4.2/3": {"", "max frame size is 1 MiB, not 16 KiB"},
	// net/http closes a connection whose SETTINGS frame repeats a setting (a DoS guard); the
	// RFC says to apply the values in order.
	"http2/6.5.3/1": {"", "duplicate settings are a connection error"},
	// net/http answers 400 Bad Request to a request with a connection-specific header or TE
	// other than trailers, where the RFC asks for a stream error: the request is refused either way.
	"http2/8.1.2.2/1": {"", "connection-specific header gets 400, not RST_STREAM"},
	"http2/8.1.2.2/2": {"", "TE other than trailers gets 400, not RST_STREAM"},
	// On the cleartext port an invalid HTTP/2 preface is an HTTP/1.1 request, answered with 400
	// rather than a closed connection: the port serves both.
	"http2/3.5/2": {"h2c", "the cleartext port also speaks HTTP/1.1"},
}

type h2specResult struct{ id, name, failure string }

// readH2SpecReport reads h2spec's JUnit report; a case's id is its section and its position in
// it, as h2spec numbers them (http2/6.5.3/1).
func readH2SpecReport(path string) ([]h2specResult, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var doc struct {
		Suites []struct {
			Package string `xml:"package,attr"`
			Cases   []struct {
				Name    string  `xml:"classname,attr"`
				Failure *string `xml:"failure"`
				Error   *string `xml:"error"`
				Skipped *string `xml:"skipped"`
			} `xml:"testcase"`
		} `xml:"testsuite"`
	}
	if err := xml.Unmarshal(data, &doc); err != nil {
		return nil, err
	}
	var results []h2specResult
	for _, s := range doc.Suites {
		for i, c := range s.Cases {
			r := h2specResult{id: s.Package + "/" + strconv.Itoa(i+1), name: c.Name}
			switch {
			case c.Failure != nil:
				r.failure = *c.Failure
			case c.Error != nil:
				r.failure = *c.Error
			}
			results = append(results, r)
		}
	}
	return results, nil
}

// TestACME obtains a certificate from Pebble, a local ACME test CA, serves HTTPS with it, and
// loads it back from storage on the next start instead of asking again.
func TestACME(t *testing.T) {
	needHTTPSBanner(t)
	pebble := startPebble(t)
	const domain = "site.peregrine.test"
	storage := filepath.Join(t.TempDir(), "certs")
	yaml := frontConfig(t, fmt.Sprintf(`http:
  tls:
    redirect_address: 127.0.0.1:0
    acme:
      email: admin@peregrine.test
      domains: [%s]
      ca: %s
      ca_root: %s
      storage: %s
`, domain, pebble.directory, pebble.caFile, storage))

	s := startServer(t, yaml)
	s.log.waitFor(t, `certificate obtained"`, 90*time.Second) // "msg":"…" or msg="…"
	roots := pebble.roots(t)
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(s.URL, "https://"))
	base := "https://" + domain + ":" + port
	// certmagic logs "certificate obtained" a moment before it puts the certificate in the cache
	// that handshakes read: until then a handshake fails (internal error), as for any client
	// that comes before the certificate.
	deadline := time.Now().Add(10 * time.Second)
	for {
		conn, err := tls.Dial("tcp", "127.0.0.1:"+port, &tls.Config{RootCAs: roots, ServerName: domain})
		if err == nil {
			conn.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no TLS handshake with the obtained certificate: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	c := newClient(&http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}, DialContext: dialLoopback(), ForceAttemptHTTP2: true})
	defer c.CloseIdleConnections()
	resp, got := fetch(t, c, base+"/acme")
	if leaf := resp.TLS.PeerCertificates[0]; !slices.Contains(leaf.DNSNames, domain) {
		t.Errorf("certificate for %v, want %s", leaf.DNSNames, domain)
	}
	if resp.Proto != "HTTP/2.0" || got.Scheme != "https" || got.Host != domain+":"+port {
		t.Errorf("%s; PHP saw %+v", resp.Proto, got)
	}

	// A client that sends no server name gets the first domain's certificate.
	conn, err := tls.Dial("tcp", "127.0.0.1:"+port, &tls.Config{RootCAs: roots, ServerName: domain,
		// no SNI is sent for an IP address: verify against the domain by hand
		InsecureSkipVerify: true, VerifyConnection: func(cs tls.ConnectionState) error {
			return cs.PeerCertificates[0].VerifyHostname(domain)
		}})
	if err != nil {
		t.Errorf("TLS without SNI: %v", err)
	} else {
		conn.Close()
	}

	// The redirect listener, which also answers HTTP-01 challenges, sends others to HTTPS.
	redirect := s.log.waitFor(t, `redirecting to https\W+address\W+[0-9.:]+`, 10*time.Second)
	redirect = redirect[strings.LastIndexAny(redirect, "= \"")+1:]
	req, _ := http.NewRequest(http.MethodGet, "http://"+redirect+"/x?y=1", nil)
	req.Host = domain
	r, err := newClient(&http.Transport{}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	if want := base + "/x?y=1"; r.StatusCode != http.StatusPermanentRedirect || r.Header.Get("Location") != want {
		t.Errorf("redirect: %d to %q, want 308 to %q", r.StatusCode, r.Header.Get("Location"), want)
	}
	s.stop(t)

	// Started again on the same storage, it serves the stored certificate without the CA.
	pebble.stop(t)
	s = startServer(t, yaml)
	_, port, _ = net.SplitHostPort(strings.TrimPrefix(s.URL, "https://"))
	c = newClient(&http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}, DialContext: dialLoopback(), ForceAttemptHTTP2: true})
	defer c.CloseIdleConnections()
	eventually(t, 30*time.Second, "the stored certificate to be served", func() bool {
		r, err := c.Get("https://" + domain + ":" + port + "/")
		if err != nil {
			return false
		}
		r.Body.Close()
		return r.StatusCode == http.StatusOK
	})
	if n := s.log.count(`certificate obtained"`); n != 0 {
		t.Errorf("the second start obtained %d certificates; want it to load the stored one", n)
	}
}

// pebbleCA is a running Pebble.
type pebbleCA struct {
	directory  string // the ACME directory URL
	management string // base URL of the management API
	caFile     string // the PEM root of Pebble's own HTTPS certificate
	client     *http.Client
	cmd        *exec.Cmd
	out        *bytes.Buffer
	done       chan struct{}
}

// startPebble builds Pebble and starts it on free loopback ports, validating every challenge
// without looking (PEBBLE_VA_ALWAYS_VALID), so that no DNS or port 80 is needed.
func startPebble(t *testing.T) *pebbleCA {
	t.Helper()
	bin := buildTool(t, "github.com/letsencrypt/pebble/v2/cmd/pebble")
	dir := t.TempDir()
	ca := newTestCA(t)
	cert, key := ca.issue(t, dir, "localhost", "127.0.0.1")
	caFile := filepath.Join(dir, "pebble-ca.pem")
	if err := os.WriteFile(caFile, ca.pem, 0o644); err != nil {
		t.Fatal(err)
	}
	ports := freePorts(t, 4)
	cfg := map[string]any{"pebble": map[string]any{
		"listenAddress":                  "127.0.0.1:" + ports[0],
		"managementListenAddress":        "127.0.0.1:" + ports[1],
		"certificate":                    cert,
		"privateKey":                     key,
		"httpPort":                       ports[2],
		"tlsPort":                        ports[3],
		"ocspResponderURL":               "",
		"externalAccountBindingRequired": false,
		"retryAfter":                     map[string]int{"authz": 1, "order": 1},
	}}
	for _, k := range []string{"httpPort", "tlsPort"} {
		n, _ := strconv.Atoi(cfg["pebble"].(map[string]any)[k].(string))
		cfg["pebble"].(map[string]any)[k] = n
	}
	data, _ := json.Marshal(cfg)
	cfgFile := filepath.Join(dir, "pebble.json")
	if err := os.WriteFile(cfgFile, data, 0o644); err != nil {
		t.Fatal(err)
	}
	p := &pebbleCA{
		directory:  "https://127.0.0.1:" + ports[0] + "/dir",
		management: "https://127.0.0.1:" + ports[1],
		caFile:     caFile,
		client:     newClient(&http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.pool}}),
		out:        &bytes.Buffer{},
		done:       make(chan struct{}),
	}
	p.cmd = exec.Command(bin, "-config", cfgFile)
	p.cmd.Dir = dir
	p.cmd.Env = append(os.Environ(), "PEBBLE_VA_ALWAYS_VALID=1", "PEBBLE_VA_NOSLEEP=1", "PEBBLE_WFE_NONCEREJECT=0")
	p.cmd.Stdout, p.cmd.Stderr = &lockedWriter{w: p.out}, &lockedWriter{w: p.out}
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() { p.stop(t) })
	eventually(t, 30*time.Second, "pebble to listen", func() bool {
		select {
		case <-p.done:
			t.Fatalf("pebble exited: %s", p.output())
		default:
		}
		r, err := p.client.Get(p.directory)
		if err != nil {
			return false
		}
		r.Body.Close()
		return r.StatusCode == http.StatusOK
	})
	return p
}

// roots returns the root Pebble signs certificates with (it makes a new one at each start).
func (p *pebbleCA) roots(t *testing.T) *x509.CertPool {
	t.Helper()
	r, err := p.client.Get(p.management + "/roots/0")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	pemData, _ := io.ReadAll(r.Body)
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pemData) {
		t.Fatalf("pebble's root: %q", pemData)
	}
	return pool
}

// stop kills Pebble (the process this test started) and waits for it.
func (p *pebbleCA) stop(t *testing.T) {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Kill()
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		t.Errorf("pebble did not exit after SIGKILL")
	}
	if t.Failed() {
		t.Logf("pebble output:\n%s", p.output())
	}
}

func (p *pebbleCA) output() string {
	return p.out.String()
}

// lockedWriter serialises the writes of a process's stdout and stderr into one buffer.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

// buildTool builds a tool of go.mod's tool directives into the test's temporary directory.
func buildTool(t *testing.T, pkg string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), filepath.Base(pkg))
	out, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput()
	if err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, out)
	}
	return bin
}

// curlPath returns curl's path, or "" (with a log line) when curl is not installed.
func curlPath(t *testing.T) string {
	p, err := exec.LookPath("curl")
	if err != nil {
		t.Log("curl is not installed: the curl checks are skipped (scripts/setup.sh installs it)")
		return ""
	}
	return p
}

// run runs a command with a deadline and returns its trimmed standard output.
func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Errorf("%s %s: %v\n%s", name, strings.Join(args, " "), err, stderr.String())
	}
	return strings.TrimSpace(string(out))
}

// dialLoopback dials every address on the loopback interface at its port, so that test domain
// names need no DNS.
func dialLoopback() func(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		_, port, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		return d.DialContext(ctx, "tcp4", "127.0.0.1:"+port)
	}
}

// freePorts returns n loopback ports free at the time of the call. They come from below the
// kernel's ephemeral range (net.ipv4.ip_local_port_range, 32768-60999 by default), so that no
// listener on port 0 and no outgoing connection of another test can take one between this call
// and the server's bind, as happened in CI ("admin.address: bind: address already in use").
func freePorts(t *testing.T, n int) []string {
	t.Helper()
	var ports []string
	for len(ports) < n {
		p := nextPort.Add(1)
		if p >= ephemeralFloor {
			t.Fatal("freePorts: no port left below the ephemeral range")
		}
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			continue // taken by someone else: try the next one
		}
		ln.Close()
		ports = append(ports, fmt.Sprint(p))
	}
	return ports
}

// ephemeralFloor is the lowest port the kernel hands out on its own, and nextPort the last port
// freePorts gave: each test binary starts at its own offset from 20000.
const ephemeralFloor = 32768

var nextPort = func() *atomic.Int32 {
	var p atomic.Int32
	p.Store(int32(20000 + os.Getpid()%1000*10))
	return &p
}()

// testCA is a certificate authority made for one test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
	pool *x509.CertPool
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "Peregrine test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	ca := &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pool: x509.NewCertPool()}
	ca.pool.AddCert(cert)
	return ca
}

// issue writes a certificate for names (DNS names or IP addresses) and its key into dir, and
// returns their paths.
func (ca *testCA) issue(t *testing.T, dir string, names ...string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: names[0]},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, n)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, names[0]+"-"+serial.String()+".pem"), filepath.Join(dir, names[0]+"-"+serial.String()+".key")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}
