package integration

// The findings of issue 9, each reproduced through the real binary and real PHP: what a hostile
// client or a second user must never get. docs/security.md says what each test proves.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"net/textproto"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// repoRoot is the checkout the tests run from.
func repoRoot(t *testing.T) string {
	t.Helper()
	p, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// securityWorker writes a serveGlobals worker whose script is body (PHP, after <?php and the
// autoloader), and returns its path. Output sent to STDOUT at boot would disable PHP sessions
// for good, so the body runs only inside requests.
func securityWorker(t *testing.T, mode, body string) string {
	t.Helper()
	src := "<?php\ndeclare(strict_types=1);\nrequire " + strconv.Quote(filepath.Join(repoRoot(t), "php", "autoload.php")) + ";\n"
	switch mode {
	case "globals":
		src += "Peregrine\\Worker::create()->serveGlobals(static function (): void {\n" + body + "\n});\n"
	case "raw":
		src += "Peregrine\\Worker::create()->serve(static function (Peregrine\\Http\\Request $request): Peregrine\\Http\\Response {\n" + body + "\n});\n"
	default:
		t.Fatalf("mode %q", mode)
	}
	p := filepath.Join(t.TempDir(), "worker.php")
	if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// sessionCookie returns the PHPSESSID value a response sets, or "".
func sessionCookie(r response, name string) string {
	for _, c := range (&http.Response{Header: r.Header}).Cookies() {
		if c.Name == name {
			return c.Value
		}
	}
	return ""
}

// Finding 1: one worker serves users A and B interleaved and a client with no cookie; each sees
// only its own session, and a new session sends its cookie.
func TestSecuritySessionsDoNotBleedBetweenUsers(t *testing.T) {
	t.Parallel()
	sessions := t.TempDir()
	w := securityWorker(t, "globals", `
		session_start();
		if (isset($_GET['login'])) {
		    $_SESSION['user'] = $_GET['login'];
		}
		echo $_SESSION['user'] ?? 'guest';
		if (isset($_GET['close'])) {
		    session_write_close();
		}`)
	s := startServer(t, fmt.Sprintf("workers:\n  command: php -d session.save_path=%s %s\n  count: 1\n", sessions, w))

	a := get(t, s.URL+"/?login=alice")
	idA := sessionCookie(a, "PHPSESSID")
	if string(a.Body) != "alice" || idA == "" {
		t.Fatalf("A logs in: %q, Set-Cookie %q; want alice and a PHPSESSID cookie", a.Body, a.Header.Values("Set-Cookie"))
	}
	if cc := a.Header.Get("Cache-Control"); !strings.Contains(cc, "no-store") {
		t.Errorf("a session page without session.cache_limiter's Cache-Control: %q", cc)
	}
	b := do(t, "GET", s.URL+"/?close=1", nil, "Cookie", "PHPSESSID=bobsownsessionid0000000000")
	if string(b.Body) != "guest" {
		t.Errorf("B with a session id of its own sees %q, want guest (not A's session)", b.Body)
	}
	b = do(t, "GET", s.URL+"/?login=bob", nil, "Cookie", "PHPSESSID=bobsownsessionid0000000000")
	if string(b.Body) != "bob" || sessionCookie(b, "PHPSESSID") != "" {
		t.Errorf("B logs in: %q, Set-Cookie %q; want bob and no new cookie", b.Body, b.Header.Values("Set-Cookie"))
	}
	c := get(t, s.URL+"/")
	if string(c.Body) != "guest" {
		t.Errorf("a client without a cookie sees %q, want guest", c.Body)
	}
	if id := sessionCookie(c, "PHPSESSID"); id == "" || id == idA {
		t.Errorf("a client without a cookie got session id %q (A's is %q), want a new one", id, idA)
	}
	if r := do(t, "GET", s.URL+"/", nil, "Cookie", "PHPSESSID="+idA); string(r.Body) != "alice" {
		t.Errorf("A again sees %q, want alice", r.Body)
	}
	if r := do(t, "GET", s.URL+"/", nil, "Cookie", "PHPSESSID=bobsownsessionid0000000000"); string(r.Body) != "bob" {
		t.Errorf("B again sees %q, want bob", r.Body)
	}
}

// Finding 1, one level up: the Laravel adapter in bench/apps/laravel, the pattern users copy.
func TestSecurityLaravelAuthDoesNotBleedBetweenUsers(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/usr/share/php/Illuminate/autoload.php"); err != nil {
		t.Skip("php-laravel-framework is not installed (make bench installs it)")
	}
	dir := t.TempDir()
	boot := filepath.Join(dir, "routes.php")
	if err := os.WriteFile(boot, []byte(`<?php
// Test routes: a session guard over users that exist by name, and file sessions.
use Illuminate\Auth\GenericUser;
use Illuminate\Contracts\Auth\Authenticatable;
use Illuminate\Contracts\Auth\UserProvider;
use Illuminate\Session\Middleware\StartSession;
use Illuminate\Support\Facades\Auth;

config([
    'session.driver' => 'file',
    'session.files' => getenv('LARAVEL_RUNTIME_DIR') . '/sessions',
    'session.lottery' => [0, 100],
    'auth.defaults.guard' => 'web',
    'auth.guards.web' => ['driver' => 'session', 'provider' => 'named'],
    'auth.providers.named' => ['driver' => 'named'],
]);
@mkdir(getenv('LARAVEL_RUNTIME_DIR') . '/sessions', 0777, true);
Auth::provider('named', static fn () => new class implements UserProvider {
    public function retrieveById($identifier) { return new GenericUser(['id' => $identifier, 'remember_token' => null]); }
    public function retrieveByToken($identifier, $token) { return null; }
    public function updateRememberToken(Authenticatable $user, $token) {}
    public function retrieveByCredentials(array $credentials) { return null; }
    public function validateCredentials(Authenticatable $user, array $credentials) { return false; }
});
$app['router']->middleware(StartSession::class)->group(static function ($router): void {
    $router->get('/login', static function () {
        Auth::login(new GenericUser(['id' => request('user'), 'remember_token' => null]));
        return response('logged in ' . Auth::id());
    });
    $router->get('/whoami', static fn () => response((string) (Auth::id() ?? 'guest')));
});
`), 0o644); err != nil {
		t.Fatal(err)
	}
	worker := filepath.Join(repoRoot(t), "bench", "apps", "laravel", "worker.php")
	s := startServer(t, fmt.Sprintf("workers:\n  command: php %s\n  count: 1\n  env: { PEREGRINE_LARAVEL_TEST_BOOT: %s, LARAVEL_RUNTIME_DIR: %s }\n", worker, boot, dir))

	a := get(t, s.URL+"/login?user=alice")
	cookie := sessionCookie(a, "peregrine_bench_session")
	if a.Status != 200 || string(a.Body) != "logged in alice" || cookie == "" {
		t.Fatalf("A logs in: %d %q, Set-Cookie %q", a.Status, a.Body, a.Header.Values("Set-Cookie"))
	}
	if r := get(t, s.URL+"/whoami"); string(r.Body) != "guest" {
		t.Errorf("a client without a cookie after A logged in is %q, want guest", r.Body)
	}
	if r := do(t, "GET", s.URL+"/whoami", nil, "Cookie", "peregrine_bench_session="+cookie); string(r.Body) != "alice" {
		t.Errorf("A with its cookie is %q, want alice", r.Body)
	}
	if r := get(t, s.URL+"/whoami"); string(r.Body) != "guest" {
		t.Errorf("a client without a cookie after A's second request is %q, want guest", r.Body)
	}
}

// Finding 2: a Proxy request header never becomes HTTP_PROXY, in any mode.
func TestSecurityHttpoxy(t *testing.T) {
	t.Parallel()
	globals := startServer(t, "workers:\n  command: php "+securityWorker(t, "globals", `
		echo json_encode([$_SERVER['HTTP_PROXY'] ?? null, getenv('HTTP_PROXY') ?: null]);`)+"\n  count: 1\n")
	if r := do(t, "GET", globals.URL+"/", nil, "Proxy", "http://evil.example:3128"); string(r.Body) != "[null,null]" {
		t.Errorf("serveGlobals: HTTP_PROXY, getenv = %s, want [null,null]", r.Body)
	}
	raw := startServer(t, "workers:\n  command: php "+securityWorker(t, "raw", `
		return new Peregrine\Http\Response(200, [], json_encode($request->headers['proxy'] ?? null));`)+"\n  count: 1\n")
	if r := do(t, "GET", raw.URL+"/", nil, "Proxy", "http://evil.example:3128"); string(r.Body) != "null" {
		t.Errorf("serve: the Proxy header reached PHP: %s", r.Body)
	}
}

// Finding 3 and 11: limits on headers and cookies answer before PHP; odd names do not 500.
func TestSecurityRequestLimits(t *testing.T) {
	t.Parallel()
	s := startServer(t, "workers:\n  command: php "+securityWorker(t, "globals", `
		echo count($_COOKIE), ' ', $_SERVER['HTTP_123'] ?? '-';`)+"\n  count: 1\n")
	collide := func(n int, f string) []string {
		var out []string
		for i := 1; i <= n; i++ {
			out = append(out, fmt.Sprintf(f, i<<20))
		}
		return out
	}
	headers := func(names []string) []string {
		var kv []string
		for _, n := range names {
			kv = append(kv, "X-"+n, "1")
		}
		return kv
	}
	tests := []struct {
		name    string
		headers []string
		want    int
		body    string
	}{
		{"a header named 123", []string{"123", "x"}, 200, "0 x"},
		{"colliding header names", headers(collide(200, "%d")), 431, ""},
		{"an 9 KiB header line", []string{"X-Big", strings.Repeat("a", 9<<10)}, 431, ""},
		{"colliding cookie names", []string{"Cookie", strings.Join(collide(600, "%d=1"), "; "), "Cookie", strings.Join(collide(600, "%d=2"), "; ")}, 431, ""},
		{"500 cookies", []string{"Cookie", strings.Join(collide(500, "%d=1"), "; ")}, 200, "500 -"},
		{"two Authorization headers", []string{"Authorization", "Basic YTpi", "Authorization", "Basic Yzpk"}, 400, ""},
	}
	for _, tt := range tests {
		r := do(t, "GET", s.URL+"/", nil, tt.headers...)
		if r.Status != tt.want || (tt.body != "" && string(r.Body) != tt.body) {
			t.Errorf("%s: %d %.80q, want %d %q", tt.name, r.Status, r.Body, tt.want, tt.body)
		}
	}
	// Short names: 1001 colliding ones make a request line over 8 KiB, a 414 before the count.
	var short []string
	for i := range 1001 {
		short = append(short, fmt.Sprintf("%x=", i))
	}
	if r := get(t, s.URL+"/?"+strings.Join(short, "&")); r.Status != 400 {
		t.Errorf("1001 query fields: %d, want 400", r.Status)
	}
	if r := get(t, s.URL+"/?"+strings.Join(collide(1001, "%d=1"), "&")); r.Status != 414 {
		t.Errorf("a request line over 8 KiB: %d, want 414", r.Status)
	}
}

// Finding 11: cookies parse as PHP parses them.
func TestSecurityCookiesParseAsPHP(t *testing.T) {
	t.Parallel()
	s := startServer(t, "workers:\n  command: php "+securityWorker(t, "globals", `echo json_encode($_COOKIE);`)+"\n  count: 1\n")
	if r := do(t, "GET", s.URL+"/", nil, "Cookie", "a[b]=1; a[c]=2; a=3"); string(r.Body) != `{"a":{"b":"1","c":"2"}}` {
		t.Errorf("$_COOKIE = %s, want PHP's {\"a\":{\"b\":\"1\",\"c\":\"2\"}}", r.Body)
	}
}

// Finding 6: output buffering in FPM-style code discards as under PHP-FPM.
func TestSecurityOutputBufferDiscards(t *testing.T) {
	t.Parallel()
	s := startServer(t, "workers:\n  command: php "+securityWorker(t, "globals", `
		switch ($_GET['case'] ?? '') {
		case 'clean': echo 'secret'; ob_clean(); echo 'body'; break;
		case 'get_clean': echo 'secret'; ob_get_clean(); echo 'body'; break;
		case 'end_clean': echo 'secret'; ob_end_clean(); echo 'body'; break;
		case 'nonremovable': ob_start(null, 0, 0); echo 'body'; break;
		default: echo 'level ', ob_get_level();
		}`)+"\n  count: 1\n")
	for _, c := range []string{"clean", "get_clean", "end_clean", "nonremovable"} {
		if r := get(t, s.URL+"/?case="+c); r.Status != 200 || string(r.Body) != "body" {
			t.Errorf("%s: %d %q, want body", c, r.Status, r.Body)
		}
	}
	if strings.Contains(s.log.String(), "secret") {
		t.Errorf("discarded output reached the log:\n%s", s.log.String())
	}
}

// Finding 11: a Status header sets the status, as PHP-FPM does through nginx.
func TestSecurityStatusHeader(t *testing.T) {
	t.Parallel()
	s := startServer(t, "workers:\n  command: php "+securityWorker(t, "globals", `
		Peregrine\Http\header('Status: 403 Forbidden'); echo 'no';`)+"\n  count: 1\n")
	if r := get(t, s.URL+"/"); r.Status != 403 || r.Header.Get("Status") != "" {
		t.Errorf("Status: 403: got %d, Status header %q", r.Status, r.Header.Get("Status"))
	}
}

// Finding 11: SERVER_NAME is not the client's Host header: it is http.server_name, or the address
// the connection arrived on, on both runtimes, for a worker script without http.root too (the
// native runtime had none there: the front passes SERVER_NAME only to scripts under a root).
func TestSecurityServerNameIsNotTheHostHeader(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ runtime, mode, http, want string }{
		{"native", "globals", "", "127.0.0.1"},
		{"native", "raw", "", "127.0.0.1"},
		{"cli", "globals", "", "127.0.0.1"},
		{"native", "raw", "http:\n  server_name: app.example\n", "app.example"},
	} {
		t.Run(tc.runtime+"-"+tc.mode, func(t *testing.T) {
			t.Parallel()
			body := `echo json_encode($_SERVER['SERVER_NAME'] ?? null);`
			if tc.mode == "raw" {
				body = `return new Peregrine\Http\Response(200, [], json_encode($_SERVER['SERVER_NAME'] ?? null));`
			}
			s := startServer(t, tc.http+"workers:\n  runtime: "+tc.runtime+"\n  command: php "+securityWorker(t, tc.mode, body)+"\n  count: 1\n")
			req, _ := http.NewRequest("GET", s.URL+"/", nil)
			req.Host = "evil.example"
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if b, _ := io.ReadAll(resp.Body); string(b) != `"`+tc.want+`"` {
				t.Errorf("SERVER_NAME = %s, want %q: the server's name, never the Host header", b, tc.want)
			}
		})
	}
}

// Finding 9: filename*= and name*= are ignored, as PHP ignores them.
func TestSecurityMultipartExtendedFilenameIgnored(t *testing.T) {
	t.Parallel()
	s := startServer(t, "workers:\n  command: php "+securityWorker(t, "globals", `
		echo json_encode([$_FILES['up']['name'] ?? null, $_POST]);`)+"\n  count: 1\n")
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	h := textproto.MIMEHeader{}
	h.Set("Content-Disposition", `form-data; name="up"; filename="safe.jpg"; filename*=UTF-8''evil.php`)
	h.Set("Content-Type", "image/jpeg")
	p, _ := mw.CreatePart(h)
	_, _ = p.Write([]byte("<?php system($_GET['c']);"))
	h = textproto.MIMEHeader{}
	h.Set("Content-Disposition", `form-data; name="role"; name*=UTF-8''admin`)
	p, _ = mw.CreatePart(h)
	_, _ = p.Write([]byte("user"))
	_ = mw.Close()
	r := do(t, "POST", s.URL+"/", &body, "Content-Type", mw.FormDataContentType())
	if string(r.Body) != `["safe.jpg",{"role":"user"}]` {
		t.Errorf("got %s, want [\"safe.jpg\",{\"role\":\"user\"}] as PHP-FPM gives", r.Body)
	}
}

// Finding 7: Content-Length with Transfer-Encoding, or a folded Transfer-Encoding, is a 400 and
// the connection is closed: the request hidden in the body is never served.
func TestSecuritySmugglingRefused(t *testing.T) {
	t.Parallel()
	s := startServer(t, "workers:\n  command: php "+securityWorker(t, "globals", `echo 'served ', $_SERVER['REQUEST_URI'];`)+"\n  count: 1\n")
	addr := strings.TrimPrefix(s.URL, "http://")
	hidden := "GET /hidden HTTP/1.1\r\nHost: x\r\n\r\n"
	chunked := "0\r\n\r\n" + hidden
	for name, raw := range map[string]string{
		"CL.TE":             "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: " + strconv.Itoa(len(chunked)) + "\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked,
		"TE in an obs-fold": "POST / HTTP/1.1\r\nHost: x\r\nX-Pad: a\r\n Transfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n" + hidden,
	} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(30 * time.Second))
		if _, err := io.WriteString(c, raw); err != nil {
			t.Fatal(err)
		}
		all, _ := io.ReadAll(c) // until the server closes, or the deadline
		c.Close()
		br := bufio.NewReader(bytes.NewReader(all))
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Errorf("%s: no response: %v (%q)", name, err, all)
			continue
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		if resp.StatusCode != 400 {
			t.Errorf("%s: %d, want 400", name, resp.StatusCode)
		}
		if bytes.Contains(all, []byte("served /hidden")) {
			t.Errorf("%s: the hidden request was served", name)
		}
		if rest, _ := io.ReadAll(br); len(rest) != 0 {
			t.Errorf("%s: more after the 400 (the connection stayed open): %q", name, rest)
		}
	}
}

// Finding 8: the admin listener wants its token, and refuses cross-origin requests and foreign
// Host headers; a non-loopback admin address without a token does not start.
func TestSecurityAdminListener(t *testing.T) {
	t.Parallel()
	addr := freeAddr(t)
	startServer(t, "workers:\n  command: php "+securityWorker(t, "globals", `echo 'ok';`)+"\n  count: 1\nadmin:\n  address: "+addr+"\n")
	admin := "http://" + addr
	if r := do(t, "POST", admin+"/reset", nil, "Origin", "https://evil.example", "Sec-Fetch-Site", "cross-site"); r.Status != 403 {
		t.Errorf("cross-site POST /reset: %d, want 403", r.Status)
	}
	req, _ := http.NewRequest("GET", admin+"/workers", nil)
	req.Host = "rebind.evil.example:" + strings.Split(addr, ":")[1]
	if resp, err := client.Do(req); err != nil || resp.StatusCode != 403 {
		t.Errorf("GET /workers with a foreign Host: %v %v, want 403", resp, err)
	} else {
		resp.Body.Close()
	}
	if r := get(t, admin+"/health"); r.Status != 200 {
		t.Errorf("GET /health from this machine: %d", r.Status)
	}

	// With a token: the CLI sends it from the config file.
	addr2 := freeAddr(t)
	yaml := "workers:\n  command: php " + securityWorker(t, "globals", `echo 'ok';`) + "\n  count: 1\nadmin:\n  address: " + addr2 + "\n  token: s3cret\n"
	startServer(t, yaml)
	if r := get(t, "http://"+addr2+"/workers"); r.Status != 401 {
		t.Errorf("GET /workers without the token: %d, want 401", r.Status)
	}
	if r := do(t, "GET", "http://"+addr2+"/workers", nil, "Authorization", "Bearer s3cret"); r.Status != 200 {
		t.Errorf("GET /workers with the token: %d, want 200", r.Status)
	}
	dir := t.TempDir()
	cfg := filepath.Join(dir, "p.yaml")
	if err := os.WriteFile(cfg, []byte(strings.Replace(yaml, "admin:", "http:\n  address: 127.0.0.1:0\nadmin:", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, code := runCLI(t, dir, nil, "workers", "-c", cfg); code != 0 {
		t.Errorf("peregrine workers with the token in the config: %d %s", code, out)
	}

	// Listening on every interface without a token is refused at start, naming the key.
	if err := os.WriteFile(cfg, []byte("workers:\n  command: php x.php\nadmin:\n  address: 0.0.0.0:"+strings.Split(freeAddr(t), ":")[1]+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, code := runCLI(t, dir, nil, "config", "check", "-c", cfg)
	if code != 1 || !strings.Contains(out, "admin.token") {
		t.Errorf("config check with admin.address 0.0.0.0 and no token: %d %s, want exit 1 naming admin.token", code, out)
	}
}

// Finding 12: upload directories of a daemon that was SIGKILLed are swept at the next start.
func TestSecurityStaleUploadDirsAreSwept(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp) // inherited by the server: os.TempDir()
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Skip(err)
	}
	stale := filepath.Join(tmp, "peregrine-uploads-"+strconv.Itoa(dead.Process.Pid))
	if err := os.Mkdir(stale, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(stale, "peregrine-upload-123"), []byte("someone's upload"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, "workers:\n  command: php "+securityWorker(t, "globals", `echo 'ok';`)+"\n  count: 1\n")
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("the dead daemon's upload directory is still there after a start: %v", err)
	}
	// The running daemon's own directory, named after its pid.
	own := filepath.Join(tmp, "peregrine-uploads-"+strconv.Itoa(s.cmd.Process.Pid))
	if _, err := os.Stat(own); err != nil {
		t.Errorf("no upload directory %s for the running daemon: %v", own, err)
	}
}

// Finding 10: at http.max_connections, a new connection waits instead of taking a descriptor,
// and is served once another closes.
func TestSecurityConnectionCap(t *testing.T) {
	t.Parallel()
	s := startServer(t, "http:\n  max_connections: 2\nworkers:\n  command: php "+securityWorker(t, "globals", `echo 'ok';`)+"\n  count: 1\n")
	addr := strings.TrimPrefix(s.URL, "http://")
	var held []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		// A served request proves the connection was accepted.
		_, _ = io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		held = append(held, c)
	}
	third := make(chan error, 1)
	go func() {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			third <- err
			return
		}
		defer c.Close()
		_, _ = io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
		_ = c.SetReadDeadline(time.Now().Add(60 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err == nil {
			resp.Body.Close()
		}
		third <- err
	}()
	held[0].Close()
	select {
	case err := <-third:
		if err != nil {
			t.Errorf("the third connection, after one closed: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the third connection was never served after one closed")
	}
}

// The environment PHP code sees (docs/security.md): the daemon's, plus workers.env.
func TestSecurityWorkerEnvironment(t *testing.T) {
	t.Parallel()
	s := startServer(t, "workers:\n  command: php "+securityWorker(t, "globals", `echo json_encode([getenv('PEREGRINE_SEC_TEST'), $_SERVER['PEREGRINE_SEC_TEST'] ?? null]);`)+
		"\n  count: 1\n  env: { PEREGRINE_SEC_TEST: from-config }\n")
	var got []any
	if err := json.Unmarshal(get(t, s.URL+"/").Body, &got); err != nil || len(got) != 2 || got[0] != "from-config" {
		t.Errorf("workers.env in getenv/$_SERVER: %v %v", got, err)
	}
}

// Finding 12 as reported: the daemon is SIGKILLed while an upload is being received; its
// temporary file stays behind, and the next daemon to start removes it.
func TestSecurityUploadOfAKilledDaemonIsSweptAtRestart(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp) // inherited by the servers: os.TempDir()
	yaml := "workers:\n  command: php " + securityWorker(t, "globals", `echo 'ok';`) + "\n  count: 1\n"
	s := startServer(t, yaml)

	// Half an upload: the part's headers and some of its bytes, then nothing.
	c, err := net.Dial("tcp", strings.TrimPrefix(s.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	head := "--b\r\nContent-Disposition: form-data; name=\"f\"; filename=\"big.bin\"\r\n\r\n"
	if _, err := io.WriteString(c, fmt.Sprintf("POST / HTTP/1.1\r\nHost: x\r\nContent-Type: multipart/form-data; boundary=b\r\nContent-Length: %d\r\n\r\n%s%s",
		1<<20, head, strings.Repeat("x", 64<<10))); err != nil {
		t.Fatal(err)
	}
	var partial []string
	eventually(t, 30*time.Second, "the upload's temporary file", func() bool {
		partial, _ = filepath.Glob(filepath.Join(tmp, "peregrine-uploads-*", "peregrine-upload-*"))
		return len(partial) > 0
	})
	s.signal(syscall.SIGKILL)
	s.wait(t, 30*time.Second)
	if _, err := os.Stat(partial[0]); err != nil {
		t.Fatalf("the killed daemon's upload file is already gone (%v): nothing to sweep", err)
	}

	startServer(t, yaml)
	if _, err := os.Stat(filepath.Dir(partial[0])); !os.IsNotExist(err) {
		t.Errorf("the killed daemon's upload directory %s survived a restart: %v", filepath.Dir(partial[0]), err)
	}
}

// The environment PHP code sees: the server's by default, only PATH, PEREGRINE_* and
// workers.env under workers.clear_env (PHP-FPM's clear_env), in getenv() and in $_SERVER.
func TestSecurityClearEnv(t *testing.T) {
	t.Parallel()
	var inherited []string // the variables of this process that clear_env must hide
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if name != "PATH" && !strings.HasPrefix(name, "PEREGRINE_") {
			inherited = append(inherited, name)
		}
	}
	if len(inherited) == 0 {
		t.Fatal("this test process has no variable but PATH and PEREGRINE_*: nothing to hide")
	}
	script := securityWorker(t, "globals", `
		$server = array_filter($_SERVER, static fn ($v, $k) => !str_starts_with((string) $k, 'HTTP_') && !str_starts_with((string) $k, 'REQUEST_'), ARRAY_FILTER_USE_BOTH);
		echo json_encode(['getenv' => array_keys(getenv()), 'server' => array_keys($server), 'configured' => getenv('CONFIGURED')]);`)
	for _, clear := range []bool{false, true} {
		t.Run(fmt.Sprintf("clear_env %v", clear), func(t *testing.T) {
			s := startServer(t, fmt.Sprintf("workers:\n  command: php %s\n  runtime: native\n  count: 1\n  clear_env: %v\n  env:\n    CONFIGURED: yes\n", script, clear))
			r := get(t, s.URL+"/")
			var seen struct {
				Getenv, Server []string
				Configured     string
			}
			if err := json.Unmarshal(r.Body, &seen); r.Status != 200 || err != nil {
				t.Fatalf("status %d, %v: %s", r.Status, err, r.Body)
			}
			if seen.Configured != "yes" {
				t.Errorf("workers.env: getenv('CONFIGURED') = %q", seen.Configured)
			}
			for _, name := range inherited {
				for where, names := range map[string][]string{"getenv()": seen.Getenv, "$_SERVER": seen.Server} {
					if slices.Contains(names, name) == clear {
						t.Errorf("%s: %s present = %v, want %v", where, name, clear, !clear)
					}
				}
			}
			if !slices.Contains(seen.Getenv, "PATH") {
				t.Errorf("getenv() lacks PATH: %v", seen.Getenv)
			}
		})
	}
}

// A raw handler that leaves open an output buffer PHP will not let it close (ob_start(null, 0,
// 0)): its answer is its Response, what it echoed goes to the log, and the worker goes on
// serving. On the native runtime what it echoed reaches the log at once (NativeServer makes the
// buffer closable: peregrine_output_removable()). NativeServer looped on the failing ob_get_clean() until
// exec_timeout killed the worker (504), logging a notice each time.
func TestNonRemovableBufferInARawHandler(t *testing.T) {
	t.Parallel()
	for _, runtime := range []string{"cli", "native"} {
		t.Run(runtime, func(t *testing.T) {
			t.Parallel()
			s := startServer(t, "workers:\n  runtime: "+runtime+"\n  exec_timeout: 20s\n  command: php "+securityWorker(t, "raw", `
				if (($request->queryParams['case'] ?? '') === 'stuck') { ob_start(null, 0, 0); echo "stray-output\n"; }
				return new Peregrine\Http\Response(200, ['Content-Type' => 'text/plain'], 'body');`)+"\n  count: 1\n")
			for _, c := range []string{"none", "stuck", "none", "stuck", "none"} {
				if r := get(t, s.URL+"/?case="+c); r.Status != 200 || string(r.Body) != "body" {
					t.Fatalf("%s: %d %q, want 200 body", c, r.Status, r.Body)
				}
			}
			if runtime == "native" { // the cli runtime cannot close it: its content reaches the log as the worker exits
				s.log.waitFor(t, `stray-output`, 10*time.Second)
			}
			if strings.Contains(s.log.String(), "Failed to delete buffer") {
				t.Errorf("the server failed to close the buffer:\n%s", s.log.String())
			}
		})
	}
}
