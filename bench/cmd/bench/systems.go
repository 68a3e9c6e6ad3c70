package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// A lab starts and stops the servers under test. Each server process is started in a process
// group of its own (so a Ctrl-C on the terminal reaches only this program, which then stops them
// in order) and is stopped by its pid.
type lab struct {
	ctx       context.Context
	root      string // repository root
	tmp       string // configs, sockets, logs
	peregrine string // the peregrine binary
	seq       int
	quietWait time.Duration

	mu   sync.Mutex
	live map[*proc]struct{}

	// The self-signed certificate the HTTPS servers share (tlsFiles), and a pool that trusts it.
	certFile, keyFile string
	certPool          *x509.CertPool
}

func newLab(ctx context.Context, root, tmp, peregrine string) *lab {
	return &lab{ctx: ctx, root: root, tmp: tmp, peregrine: peregrine, live: map[*proc]struct{}{}}
}

// A proc is one process the lab started.
type proc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
	err  error         // its exit status, once done is closed
	log  string        // where its stdout and stderr went
	stop syscall.Signal
}

func (l *lab) start(name, logName string, env []string, stopSig syscall.Signal, args ...string) (*proc, error) {
	logPath := filepath.Join(l.tmp, logName+".log")
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Dir = l.root
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, done: make(chan struct{}), log: logPath, stop: stopSig}
	l.mu.Lock()
	l.live[p] = struct{}{}
	l.mu.Unlock()
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return p, nil
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// terminate stops p with its stop signal, then SIGKILL after a grace period; whatever it left
// behind in its process group (its own children) is killed too.
func (l *lab) terminate(p *proc) {
	pgid := p.pid()
	if !p.exited() {
		_ = p.cmd.Process.Signal(p.stop)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			<-p.done
		}
	}
	// Children that outlived their parent are still in the group the lab created for it.
	for _, pid := range groupMembers(pgid) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	l.mu.Lock()
	delete(l.live, p)
	l.mu.Unlock()
}

// stopAll stops every process still running, newest first.
func (l *lab) stopAll() {
	l.mu.Lock()
	ps := make([]*proc, 0, len(l.live))
	for p := range l.live {
		ps = append(ps, p)
	}
	l.mu.Unlock()
	sort.Slice(ps, func(i, j int) bool { return ps[i].pid() > ps[j].pid() })
	for _, p := range ps {
		l.terminate(p)
	}
}

// groupMembers lists the processes whose process group is pgid.
func groupMembers(pgid int) []int {
	var pids []int
	for _, st := range allStats() {
		if st.pgrp == pgid {
			pids = append(pids, st.pid)
		}
	}
	return pids
}

// A server is one system under test: its processes, its URL and the pids whose process trees
// make up its memory.
type server struct {
	name  string
	url   string
	procs []*proc
	// closes: the server closes the connection after every answer (no keep-alive), which wrk
	// counts as a read error on the next request of that connection.
	closes bool
}

func (s *server) roots() []int {
	pids := make([]int, len(s.procs))
	for i, p := range s.procs {
		pids[i] = p.pid()
	}
	return pids
}

func (l *lab) stopServer(s *server) {
	// The front first (nginx before PHP-FPM), so no request reaches a stopping backend.
	for _, p := range s.procs {
		l.terminate(p)
	}
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func (l *lab) name(prefix string) string {
	l.seq++
	return fmt.Sprintf("%02d-%s", l.seq, prefix)
}

// waitReady polls the server's URL until it answers 200 with a body, or fails when one of its
// processes exits or 30 s pass.
func (l *lab) waitReady(s *server) error {
	client := l.client(2 * time.Second)
	deadline := time.Now().Add(30 * time.Second)
	var last error
	for time.Now().Before(deadline) {
		if err := l.ctx.Err(); err != nil {
			return err
		}
		for _, p := range s.procs {
			if p.exited() {
				return fmt.Errorf("%s exited during start-up (%v); its log: %s\n%s", p.name, p.err, p.log, tail(p.log))
			}
		}
		req, err := http.NewRequestWithContext(l.ctx, http.MethodGet, s.url, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 200 && len(body) > 0 {
				return nil
			}
			err = fmt.Errorf("status %d: %.200s", resp.StatusCode, body)
		}
		last = err
		time.Sleep(50 * time.Millisecond)
	}
	logs := ""
	for _, p := range s.procs {
		logs += "\n" + p.log + ":\n" + tail(p.log)
	}
	return fmt.Errorf("%s not ready at %s after 30s: %v%s", s.name, s.url, last, logs)
}

func tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

// abs returns a path under the repository root for a relative path, and an absolute one as is.
func (l *lab) abs(rel string) string {
	if filepath.IsAbs(rel) {
		return rel
	}
	return filepath.Join(l.root, rel)
}

// startPeregrine serves script with the peregrine binary and a config file in the lab's
// temporary directory, on the default runtime; phpArgs go before the script in workers.command.
func (l *lab) startPeregrine(label, script string, workers int, env map[string]string, phpArgs ...string) (*server, error) {
	return l.startPeregrineWith(label, peregrineOptions{script: script, workers: workers, env: env, phpArgs: phpArgs})
}

// peregrineOptions configure a Peregrine server.
type peregrineOptions struct {
	script  string   // the worker script; empty for classic mode
	args    []string // after the script in workers.command
	root    string   // http.root: the document root (classic mode when script is empty)
	runtime string   // workers.runtime: native or cli; empty for the default (native)
	workers int
	env     map[string]string
	phpArgs []string          // before the script in workers.command (cli runtime)
	phpIni  map[string]string // workers.php_ini
	dir     string            // workers.dir; the repository root when empty
	path    string            // the path measured (and checked at start), "/" when empty
	tls     bool              // HTTPS (and HTTP/2 by ALPN) with the lab's certificate: http.tls.cert/key
	fork    bool              // workers.fork: the workers are forked from a template process
	direct  bool              // http.direct: the workers answer HTTP themselves, no compression
}

// classicIni is the OPcache setup PHP-FPM gets (fpmIni), for Peregrine's classic mode: there too
// every request includes the app's files again, so timestamp checks would cost the same stat calls.
var classicIni = map[string]string{"opcache.enable": "1", "opcache.validate_timestamps": "0", "opcache.memory_consumption": "128"}

func (l *lab) startPeregrineWith(label string, o peregrineOptions) (*server, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	id := l.name("peregrine")
	var b strings.Builder
	fmt.Fprintf(&b, "http:\n  address: 127.0.0.1:%d\n", port)
	if o.root != "" {
		fmt.Fprintf(&b, "  root: %q\n", l.abs(o.root))
	}
	if o.direct {
		b.WriteString("  direct: true\n  compression: []\n")
	}
	scheme := "http"
	if o.tls {
		cert, key, err := l.tlsFiles()
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(&b, "  tls:\n    cert: %q\n    key: %q\n", cert, key)
		scheme = "https"
	}
	b.WriteString("workers:\n")
	if o.script != "" {
		command := []string{"php"}
		for _, a := range append(append(o.phpArgs, l.abs(o.script)), o.args...) {
			command = append(command, strconv.Quote(a))
		}
		dir := l.root
		if o.dir != "" {
			dir = l.abs(o.dir)
		}
		fmt.Fprintf(&b, "  command: [%s]\n  dir: %q\n", strings.Join(command, ", "), dir)
	}
	if o.runtime != "" {
		fmt.Fprintf(&b, "  runtime: %s\n", o.runtime)
	}
	fmt.Fprintf(&b, "  count: %d\n", o.workers)
	// Always said: forking is the default on the native runtime, and the plain rows measure exec.
	fmt.Fprintf(&b, "  fork: %t\n", o.fork)
	if len(o.env) > 0 {
		b.WriteString("  env:\n")
		for _, k := range sortedKeys(o.env) {
			fmt.Fprintf(&b, "    %s: %q\n", k, o.env[k])
		}
	}
	if len(o.phpIni) > 0 {
		b.WriteString("  php_ini:\n")
		for _, k := range sortedKeys(o.phpIni) {
			fmt.Fprintf(&b, "    %s: %q\n", k, o.phpIni[k])
		}
	}
	b.WriteString("log:\n  level: warn\n")
	conf := filepath.Join(l.tmp, id+".yaml")
	if err := os.WriteFile(conf, []byte(b.String()), 0o644); err != nil {
		return nil, err
	}
	p, err := l.start("peregrine", id, nil, syscall.SIGTERM, l.peregrine, "serve", "-c", conf)
	if err != nil {
		return nil, err
	}
	s := &server{name: label, url: fmt.Sprintf("%s://127.0.0.1:%d%s", scheme, port, urlPath(o.path)), procs: []*proc{p}}
	return s, l.ready(s)
}

func urlPath(p string) string {
	if p == "" {
		return "/"
	}
	return p
}

// fpmOptions configure nginx + PHP-FPM.
type fpmOptions struct {
	docroot string // relative to the repository root
	workers int
	backlog int    // listen.backlog of the pool (and of nginx's listening socket)
	preload string // an opcache.preload script, or ""
	env     map[string]string
	// tryFiles routes as a site for an application with a front controller is set up (WordPress):
	// files served by nginx, `try_files $uri $uri/ /index.php?$query_string`, .php files to the
	// pool through Debian's snippets/fastcgi-php.conf. Without it every request goes to index.php.
	tryFiles bool
	path     string // the path measured (and checked at start), "/" when empty
	tls      bool   // nginx listens with `ssl http2` and the lab's certificate (nginxTLS)
	gzip     bool   // nginx compresses text/html (gzip_comp_level 5, as Peregrine's gzip)
}

// startFPM runs php-fpm8.2 (pm = static, OPcache on) behind nginx, both in the foreground, from
// configs generated into the lab's temporary directory.
func (l *lab) startFPM(label string, o fpmOptions) (*server, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	id := l.name("fpm")
	dir := filepath.Join(l.tmp, id)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	root := os.Geteuid() == 0
	sock := filepath.Join(dir, "fpm.sock")
	docroot := l.abs(o.docroot)

	var f strings.Builder
	fmt.Fprintf(&f, "[global]\npid = %s\nerror_log = %s\ndaemonize = no\n\n", filepath.Join(dir, "fpm.pid"), filepath.Join(dir, "fpm-error.log"))
	f.WriteString("[bench]\n")
	if root {
		f.WriteString("user = root\ngroup = root\n")
	}
	fmt.Fprintf(&f, "listen = %s\nlisten.backlog = %d\npm = static\npm.max_children = %d\n", sock, o.backlog, o.workers)
	f.WriteString("clear_env = yes\n")
	for _, k := range sortedKeys(o.env) {
		fmt.Fprintf(&f, "env[%s] = %s\n", k, o.env[k])
	}
	fpmConf := filepath.Join(dir, "php-fpm.conf")
	if err := os.WriteFile(fpmConf, []byte(f.String()), 0o644); err != nil {
		return nil, err
	}
	args := []string{"php-fpm8.2", "-F", "-y", fpmConf}
	if root {
		args = append(args, "-R")
	}
	for _, kv := range fpmIni(o.preload, root) {
		args = append(args, "-d", kv)
	}
	fpm, err := l.start("php-fpm", id+"-php-fpm", nil, syscall.SIGQUIT, args...)
	if err != nil {
		return nil, err
	}

	var n strings.Builder
	if err := l.nginxHead(&n, dir, port, o.backlog, o.tls); err != nil {
		return nil, err
	}
	fmt.Fprintf(&n, "    root %s;\n", docroot)
	if o.gzip {
		n.WriteString("    gzip on;\n    gzip_comp_level 5;\n    gzip_types text/html;\n")
	}
	if o.tryFiles {
		// The snippet includes fastcgi.conf relative to the configuration's directory.
		if b, err := os.ReadFile("/etc/nginx/fastcgi.conf"); err == nil {
			_ = os.WriteFile(filepath.Join(dir, "fastcgi.conf"), b, 0o644)
		}
		n.WriteString("    include /etc/nginx/mime.types;\n    index index.php index.html;\n")
		n.WriteString("    location / { try_files $uri $uri/ /index.php?$query_string; }\n")
		n.WriteString("    location ~ [^/]\\.php(/|$) {\n      include /etc/nginx/snippets/fastcgi-php.conf;\n")
	} else {
		n.WriteString("    location / {\n      include /etc/nginx/fastcgi_params;\n")
		fmt.Fprintf(&n, "      fastcgi_param SCRIPT_FILENAME %s;\n      fastcgi_param SCRIPT_NAME /index.php;\n",
			filepath.Join(docroot, "index.php"))
	}
	fmt.Fprintf(&n, "      fastcgi_pass unix:%s;\n    }\n  }\n}\n", sock)
	nginxConf := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(nginxConf, []byte(n.String()), 0o644); err != nil {
		return nil, err
	}
	// Wait for the pool's socket before nginx accepts connections for it.
	for i := 0; i < 200; i++ {
		if _, err := os.Stat(sock); err == nil || fpm.exited() {
			break
		}
		time.Sleep(25 * time.Millisecond)
	}
	ngx, err := l.start("nginx", id+"-nginx", nil, syscall.SIGQUIT,
		"nginx", "-p", dir, "-e", filepath.Join(dir, "nginx-error.log"), "-c", nginxConf, "-g", "daemon off;")
	if err != nil {
		l.terminate(fpm)
		return nil, err
	}
	s := &server{name: label, url: fmt.Sprintf("%s://127.0.0.1:%d%s", schemeOf(o.tls), port, urlPath(o.path)), procs: []*proc{ngx, fpm}}
	return s, l.ready(s)
}

func schemeOf(useTLS bool) string {
	if useTLS {
		return "https"
	}
	return "http"
}

// nginxHead writes the start of an nginx configuration up to the server block's listen
// directives (and TLS settings), for a server whose pid file, logs and temporary files go to dir.
func (l *lab) nginxHead(n *strings.Builder, dir string, port, backlog int, useTLS bool) error {
	if os.Geteuid() == 0 {
		n.WriteString("user root;\n")
	}
	fmt.Fprintf(n, "worker_processes auto;\nworker_rlimit_nofile 20000;\npid %s;\nerror_log %s warn;\n",
		filepath.Join(dir, "nginx.pid"), filepath.Join(dir, "nginx-error.log"))
	n.WriteString("events { worker_connections 8192; }\n")
	n.WriteString("http {\n  access_log off;\n  keepalive_requests 1000000;\n  keepalive_timeout 65;\n")
	for _, t := range []string{"client_body", "proxy", "fastcgi", "uwsgi", "scgi"} {
		fmt.Fprintf(n, "  %s_temp_path %s;\n", t, filepath.Join(dir, "nginx-"+t))
	}
	if !useTLS {
		fmt.Fprintf(n, "  server {\n    listen 127.0.0.1:%d backlog=%d;\n", port, backlog)
		return nil
	}
	cert, key, err := l.tlsFiles()
	if err != nil {
		return err
	}
	fmt.Fprintf(n, "  server {\n    listen 127.0.0.1:%d ssl http2 backlog=%d;\n", port, backlog)
	fmt.Fprintf(n, "    ssl_certificate %s;\n    ssl_certificate_key %s;\n%s", cert, key, nginxTLS)
	return nil
}

// nginxTLS gives nginx the TLS settings Peregrine has from Go's crypto/tls defaults: TLS 1.2
// and 1.3; for 1.3 AES-128-GCM first, chosen by the server (Go's order on a CPU with AES
// instructions), for 1.2 Go's ECDHE-ECDSA suites; X25519 first, then P-256 and P-384 (Go also
// offers X25519MLKEM768, which OpenSSL 3.0's clients do not); session tickets on both sides.
const nginxTLS = `    ssl_protocols TLSv1.2 TLSv1.3;
    ssl_prefer_server_ciphers on;
    ssl_conf_command Ciphersuites TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256;
    ssl_ciphers ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-ECDSA-CHACHA20-POLY1305;
    ssl_ecdh_curve X25519:prime256v1:secp384r1;
    ssl_session_tickets on;
`

// startNginxStatic runs nginx alone, serving the files under root itself (sendfile on): the
// reference for Peregrine's static files.
func (l *lab) startNginxStatic(label, root, path string) (*server, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	id := l.name("nginx")
	dir := filepath.Join(l.tmp, id)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var n strings.Builder
	if err := l.nginxHead(&n, dir, port, fpmBacklog, false); err != nil {
		return nil, err
	}
	fmt.Fprintf(&n, "    root %s;\n    include /etc/nginx/mime.types;\n    sendfile on;\n    tcp_nopush on;\n", l.abs(root))
	n.WriteString("    location / { }\n  }\n}\n")
	conf := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(conf, []byte(n.String()), 0o644); err != nil {
		return nil, err
	}
	ngx, err := l.start("nginx", id, nil, syscall.SIGQUIT,
		"nginx", "-p", dir, "-e", filepath.Join(dir, "nginx-error.log"), "-c", conf, "-g", "daemon off;")
	if err != nil {
		return nil, err
	}
	s := &server{name: label, url: fmt.Sprintf("http://127.0.0.1:%d%s", port, urlPath(path)), procs: []*proc{ngx}}
	return s, l.ready(s)
}

// tlsFiles writes, once, a self-signed ECDSA P-256 certificate for 127.0.0.1 and localhost and
// its key into the lab's temporary directory, for every HTTPS server of the run.
func (l *lab) tlsFiles() (cert, key string, err error) {
	if l.certFile != "" {
		return l.certFile, l.keyFile, nil
	}
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(time.Now().UnixNano()),
		Subject:               pkix.Name{CommonName: "peregrine-bench"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		DNSNames:              []string{"localhost"},
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &priv.PublicKey, priv)
	if err != nil {
		return "", "", err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return "", "", err
	}
	parsed, err := x509.ParseCertificate(der)
	if err != nil {
		return "", "", err
	}
	cert, key = filepath.Join(l.tmp, "bench-cert.pem"), filepath.Join(l.tmp, "bench-key.pem")
	if err := os.WriteFile(cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return "", "", err
	}
	if err := os.WriteFile(key, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return "", "", err
	}
	l.certPool = x509.NewCertPool()
	l.certPool.AddCert(parsed)
	l.certFile, l.keyFile = cert, key
	return cert, key, nil
}

// client is an HTTP client that trusts the lab's certificate (HTTP/2 over TLS by ALPN), and
// never asks for compression by itself.
func (l *lab) client(timeout time.Duration) *http.Client {
	t := &http.Transport{DisableCompression: true, ForceAttemptHTTP2: true}
	if l.certPool != nil {
		t.TLSClientConfig = &tls.Config{RootCAs: l.certPool}
	}
	return &http.Client{Timeout: timeout, Transport: t}
}

// fpmIni is PHP-FPM's production OPcache setup: on, no timestamp checks, and the preload script.
func fpmIni(preload string, root bool) []string {
	ini := []string{"opcache.enable=1", "opcache.validate_timestamps=0", "opcache.memory_consumption=128"}
	if preload != "" {
		ini = append(ini, "opcache.preload="+preload)
		if root {
			ini = append(ini, "opcache.preload_user=root")
		}
	}
	return ini
}

// startPHPServer runs PHP's built-in server with `workers` processes (PHP_CLI_SERVER_WORKERS) and
// OPcache on.
func (l *lab) startPHPServer(label, docroot string, workers int) (*server, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	var env []string
	if workers > 1 {
		env = append(env, "PHP_CLI_SERVER_WORKERS="+strconv.Itoa(workers))
	}
	p, err := l.start("php -S", l.name("php-s"), env, syscall.SIGTERM,
		"php", "-d", "opcache.enable_cli=1", "-d", "opcache.validate_timestamps=0",
		"-S", fmt.Sprintf("127.0.0.1:%d", port), "-t", l.abs(docroot), filepath.Join(l.abs(docroot), "index.php"))
	if err != nil {
		return nil, err
	}
	s := &server{name: label, url: fmt.Sprintf("http://127.0.0.1:%d/", port), procs: []*proc{p}, closes: true}
	return s, l.ready(s)
}

// startGo runs the pure Go hello world: this program again, with -go-hello.
func (l *lab) startGo(label string) (*server, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	p, err := l.start("go net/http", l.name("go"), nil, syscall.SIGTERM, self, "-go-hello", addr)
	if err != nil {
		return nil, err
	}
	s := &server{name: label, url: "http://" + addr + "/", procs: []*proc{p}}
	return s, l.ready(s)
}

// ready waits for s and stops it if it never becomes ready.
func (l *lab) ready(s *server) error {
	if err := l.waitReady(s); err != nil {
		l.stopServer(s)
		return err
	}
	return nil
}

// drain waits until the server answers a lone request within limit: what the last load run left
// queued is done, so every run starts from an empty queue.
func (l *lab) drain(s *server, limit time.Duration) {
	client := l.client(90 * time.Second)
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) && l.ctx.Err() == nil {
		t := time.Now()
		req, err := http.NewRequestWithContext(l.ctx, http.MethodGet, s.url, nil)
		if err != nil {
			return
		}
		resp, err := client.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if time.Since(t) < limit {
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// checkTools fails with the fix when a tool the benchmark runs is missing.
func checkTools() error {
	var missing []string
	for _, t := range []string{"php", "php-fpm8.2", "nginx", "wrk", "ab", "gnuplot"} {
		if _, err := exec.LookPath(t); err != nil {
			missing = append(missing, t)
		}
	}
	for _, f := range []string{"/usr/share/php/Slim/autoload.php", "/usr/share/php/Illuminate/autoload.php", "/usr/share/php/Nyholm/Psr7/autoload.php"} {
		if _, err := os.Stat(f); err != nil {
			missing = append(missing, f)
		}
	}
	if len(missing) > 0 {
		return errors.New("missing " + strings.Join(missing, ", ") + ": run `bash bench/setup.sh` (or `make bench`)")
	}
	return nil
}
