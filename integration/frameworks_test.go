package integration

// Frameworks in worker mode (issue 10): `peregrine serve --laravel DIR` and `--symfony DIR` on
// the native runtime. The application boots once per worker; these tests prove, through the
// real binary, real PHP and real HTTP, that nothing one request changes is seen by the next
// one on the same worker, and that the framework's answer is the one PHP-FPM would give.
// docs/frameworks.md says what is reset.

import (
	"bytes"
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"mime/multipart"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

func init() {
	// serve --laravel / --symfony find the PHP library through PEREGRINE_PHP_LIB: the binary
	// under test is built outside the checkout.
	if lib, err := filepath.Abs(filepath.Join("..", "php")); err == nil {
		os.Setenv("PEREGRINE_PHP_LIB", lib)
	}
}

func requireLaravel(t *testing.T) {
	t.Helper()
	if _, err := os.Stat("/usr/share/php/Illuminate/autoload.php"); err != nil {
		t.Skip("php-laravel-framework is not installed (scripts/setup.sh installs it)")
	}
}

// copyTree copies the files under src into dst, leaving out what a run wrote into storage/ and
// bootstrap/cache/ (their .gitignore files are kept).
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		for _, skip := range []string{"storage/", "bootstrap/cache/", "var/"} {
			if strings.HasPrefix(rel, skip) && d.Name() != ".gitignore" {
				return nil
			}
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// laravelApp returns a fresh copy of examples/laravel with the probes of
// testdata/frameworks/laravel laid over it.
func laravelApp(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	copyTree(t, filepath.Join(repoRoot(t), "examples", "laravel"), dir)
	copyTree(t, filepath.Join(repoRoot(t), "testdata", "frameworks", "laravel"), dir)
	// Laravel 8 counts a compiled view as stale while its source is as new, to the second
	// (lastModified(view) >= lastModified(compiled)), and recompiles it in place on every
	// request: two workers then read each other's half-written views. A deployed app's views
	// are older than their first compilation; so are the copies here.
	past := time.Now().Add(-time.Minute)
	err := filepath.WalkDir(filepath.Join(dir, "resources"), func(path string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Chtimes(path, past, past)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// serveFramework starts `peregrine serve --FLAG dir` with count workers; PROBE_DIR, returned,
// is where the probes write what they saw. Each of workers is one more key of the workers
// section ("debug_leaks: true").
func serveFramework(t *testing.T, flag, dir string, count int, workers ...string) (*server, string) {
	t.Helper()
	probes := t.TempDir()
	yaml := fmt.Sprintf("workers:\n  runtime: native\n  count: %d\n  env: { PROBE_DIR: %s }\n", count, probes)
	for _, key := range workers {
		yaml += "  " + key + "\n"
	}
	s := launch(t, yaml, "--"+flag, dir)
	select {
	case <-s.done:
		t.Fatalf("peregrine exited at start (%v); log:\n%s", s.err, s.log.String())
	default:
	}
	return s, probes
}

// browser is one user: its own cookies, redirects not followed.
type browser struct {
	base string
	c    *http.Client
}

func newBrowser(base string) *browser {
	jar, _ := cookiejar.New(nil)
	return &browser{base: base, c: &http.Client{
		Jar:           jar,
		Timeout:       60 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
}

func (b *browser) do(method, path string, body io.Reader, headers ...string) (response, error) {
	req, err := http.NewRequest(method, b.base+path, body)
	if err != nil {
		return response{}, err
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := b.c.Do(req)
	if err != nil {
		return response{}, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	return response{Status: resp.StatusCode, Header: resp.Header, Body: data}, err
}

func (b *browser) get(path string) (response, error) { return b.do(http.MethodGet, path, nil) }

func (b *browser) post(path string, form url.Values) (response, error) {
	return b.do(http.MethodPost, path, strings.NewReader(form.Encode()), "Content-Type", "application/x-www-form-urlencoded")
}

var csrfRE = regexp.MustCompile(`name="_token" value="([^"]+)"`)

// token returns the CSRF token of the form at path.
func (b *browser) token(path string) (string, error) {
	r, err := b.get(path)
	if err != nil {
		return "", err
	}
	m := csrfRE.FindSubmatch(r.Body)
	if m == nil {
		return "", fmt.Errorf("GET %s: %d, no CSRF token in %q", path, r.Status, r.Body)
	}
	return string(m[1]), nil
}

// login logs the browser in through the example's form.
func (b *browser) login(email string) error {
	token, err := b.token("/login")
	if err != nil {
		return err
	}
	r, err := b.post("/login", url.Values{"_token": {token}, "email": {email}, "password": {"secret"}})
	if err != nil {
		return err
	}
	if r.Status != http.StatusFound || !strings.HasSuffix(r.Header.Get("Location"), "/dashboard") {
		return fmt.Errorf("login %s: %d to %q", email, r.Status, r.Header.Get("Location"))
	}
	return nil
}

type whoami struct {
	User   *string `json:"user"`
	Visits int     `json:"visits"`
	Flash  *string `json:"flash"`
}

func (b *browser) whoami() (whoami, error) {
	var w whoami
	r, err := b.get("/whoami")
	if err != nil {
		return w, err
	}
	if err := json.Unmarshal(r.Body, &w); err != nil {
		return w, fmt.Errorf("/whoami: %d %q: %v", r.Status, r.Body, err)
	}
	return w, nil
}

// must fails the test on an error: must(t)(b.get(path)).
func must(t *testing.T) func(response, error) response {
	return func(r response, err error) response {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
}

func str(p *string) string {
	if p == nil {
		return "<nil>"
	}
	return *p
}

// Every piece of state of item 1 of issue 10: user A's request changes it, and the next request
// on the same worker, from a client with no cookie, sees what it saw before A came.
func TestLaravelStateDoesNotCarryOver(t *testing.T) {
	t.Parallel()
	requireLaravel(t)
	s, _ := serveFramework(t, "laravel", laravelApp(t), 1)

	probes := []struct {
		name     string
		set      string // what user A requests
		setWant  string // part of what A gets: the change happened
		reads    []string
		setState int
	}{
		{name: "config changed at run time", set: "/probe/config/set?v=A", setWant: "A", reads: []string{"/probe/config/get"}},
		{name: "config swapped behind its facade", set: "/probe/config/swap", setWant: "swapped", reads: []string{"/probe/config/get"}},
		{name: "auth guard's user", set: "/probe/auth/set?id=1", setWant: "alice@example.com", reads: []string{"/probe/auth/get"}},
		{name: "URL generator: forced root, scheme, defaults, request", set: "/probe/url/set?v=A", setWant: "https://A.example/x", reads: []string{"/probe/url/get"}},
		{name: "validator extension", set: "/probe/validator/set", setWant: "fails", reads: []string{"/probe/validator/get"}},
		{name: "translator locale", set: "/probe/locale/set?v=fr", setWant: "fr fr", reads: []string{"/probe/locale/get"}},
		{name: "view shared data", set: "/probe/view/set?v=A", setWant: "shared", reads: []string{"/probe/view/get"}},
		{name: "container instances, bindings and singletons resolved in a request", set: "/probe/container/set?v=A", setWant: "A", reads: []string{"/probe/container/get"}},
		{name: "event listener added at run time", set: "/probe/event/set", setWant: "leaked listener", reads: []string{"/probe/event/get"}},
		{name: "gate ability defined at run time", set: "/probe/gate/set", setWant: "defined", reads: []string{"/probe/gate/get"}},
		{name: "Eloquent unguarded", set: "/probe/model/set", setWant: "unguarded", reads: []string{"/probe/model/get"}},
		{name: "array cache and a swapped cache facade", set: "/probe/cache/set?v=A", setWant: "cached", reads: []string{"/probe/cache/get"}},
		{name: "database transaction left open, query log", set: "/probe/db/set?v=A", setWant: "1", reads: []string{"/probe/db/get"}},
		{name: "exit() in the middle of a request", set: "/probe/exit/set?v=A", setWant: "bye", reads: []string{"/probe/config/get", "/probe/container/get"}},
		{name: "exception after changing config and user", set: "/probe/throw/set?v=A", setState: 500, reads: []string{"/probe/config/get", "/probe/auth/get"}},
		// Static state of Laravel's own and callbacks on the kept connection (Sandbox::STATICS).
		{name: "Str::createUuidsUsing", set: "/probe/uuid/set", setWant: "00000000-0000-0000-0000-00000000000a", reads: []string{"/probe/uuid/get"}},
		{name: "JsonResource::withoutWrapping", set: "/probe/resource/set", setWant: `{"a":1}`, reads: []string{"/probe/resource/get"}},
		{name: "Paginator::currentPageResolver", set: "/probe/paginator/set?v=7", setWant: "7", reads: []string{"/probe/paginator/get"}},
		{name: "TrimStrings::skipWhen", set: "/probe/trim/set", setWant: "skipping", reads: []string{"/probe/trim/get?s=%20x%20"}},
		{name: "exit() inside Relation::noConstraints", set: "/probe/relation/exit", setWant: "bye", reads: []string{"/probe/relation/get"}},
		{name: "a beforeExecuting callback on the database connection", set: "/probe/db/callback/set", setWant: "registered", reads: []string{"/probe/db/callback/get"}},
	}
	anonymous := newBrowser(s.URL)
	baseline := map[string]string{}
	for _, p := range probes {
		for _, read := range p.reads {
			baseline[read] = string(must(t)(anonymous.get(read)).Body)
		}
	}
	for _, p := range probes {
		t.Run(p.name, func(t *testing.T) {
			a := newBrowser(s.URL)
			r := must(t)(a.get(p.set))
			want := p.setState
			if want == 0 {
				want = http.StatusOK
			}
			if r.Status != want || !strings.Contains(string(r.Body), p.setWant) {
				t.Fatalf("user A's %s: %d %q, want %d with %q", p.set, r.Status, r.Body, want, p.setWant)
			}
			for _, read := range p.reads {
				got := string(must(t)(newBrowser(s.URL).get(read)).Body)
				if got != baseline[read] {
					t.Errorf("after user A's %s, a new client's %s = %q; before A it was %q", p.set, read, got, baseline[read])
				}
			}
		})
	}
}

// The session store and the cookie queue: A's session data and flash, and a cookie A's request
// queued, reach A only.
func TestLaravelSessionAndCookiesStayWithTheirUser(t *testing.T) {
	t.Parallel()
	requireLaravel(t)
	s, _ := serveFramework(t, "laravel", laravelApp(t), 1)
	a, b := newBrowser(s.URL), newBrowser(s.URL)

	must(t)(a.get("/probe/session/set?v=A"))
	if got := string(must(t)(b.get("/probe/session/get")).Body); got != "none|none" {
		t.Errorf("user B sees session %q after user A's; want none|none", got)
	}
	if got := string(must(t)(newBrowser(s.URL).get("/probe/session/get")).Body); got != "none|none" {
		t.Errorf("a client with no cookie sees session %q; want none|none", got)
	}
	if got := string(must(t)(a.get("/probe/session/get")).Body); got != "A|flash for A" {
		t.Errorf("user A's own session = %q, want A|flash for A", got)
	}
	if got := string(must(t)(a.get("/probe/session/get")).Body); got != "A|none" {
		t.Errorf("user A's flash outlived the request after it: %q", got)
	}

	r := must(t)(a.get("/probe/cookie/queue?v=A"))
	if sessionCookie(r, "probe") == "" {
		t.Fatalf("the queued cookie is not in user A's answer: %v", r.Header["Set-Cookie"])
	}
	r = must(t)(b.get("/probe/cookie/none"))
	if c := sessionCookie(r, "probe"); c != "" {
		t.Errorf("user B got the cookie user A's request queued: %v", r.Header["Set-Cookie"])
	}
}

// Terminable middleware and terminating callbacks run after the client has the answer, once.
func TestLaravelTerminateRunsAfterTheResponse(t *testing.T) {
	t.Parallel()
	requireLaravel(t)
	s, probes := serveFramework(t, "laravel", laravelApp(t), 1)
	file := filepath.Join(probes, "terminate-t1")

	r := must(t)(newBrowser(s.URL).get("/probe/after?token=t1"))
	if r.Status != 200 || string(r.Body) != "answered before terminate" {
		t.Fatalf("GET /probe/after: %d %q", r.Status, r.Body)
	}
	// The callback is waiting for this file: had the answer waited for terminate(), the
	// request above would have ended with "callback timeout".
	if b, _ := os.ReadFile(file); strings.Contains(string(b), "callback") {
		t.Fatalf("the terminating callback ran before the answer arrived: %q", b)
	}
	if err := os.WriteFile(filepath.Join(probes, "go-t1"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the terminating callback", func() bool {
		b, _ := os.ReadFile(file)
		return strings.Contains(string(b), "callback")
	})
	// Two more requests on the one worker: the first's terminate() has ended by the second.
	must(t)(newBrowser(s.URL).get("/probe/config/get"))
	must(t)(newBrowser(s.URL).get("/probe/config/get"))
	b, _ := os.ReadFile(file)
	if string(b) != "middleware\ncallback go\n" {
		t.Errorf("terminate wrote %q, want the middleware's line then the callback's, once each, after the answer", b)
	}
}

func TestLaravelStreamedResponse(t *testing.T) {
	t.Parallel()
	requireLaravel(t)
	s, _ := serveFramework(t, "laravel", laravelApp(t), 1)
	for i := 0; i < 3; i++ {
		r := must(t)(newBrowser(s.URL).get("/probe/stream"))
		if r.Status != 200 || string(r.Body) != "one\ntwo\nthree\n" {
			t.Fatalf("streamed response: %d %q", r.Status, r.Body)
		}
	}
}

// The example application as a user goes through it: login with errors, flash messages,
// Eloquent notes per user, an upload, the JSON API, a cookie, static files, logout.
func TestLaravelExampleJourney(t *testing.T) {
	t.Parallel()
	requireLaravel(t)
	s, _ := serveFramework(t, "laravel", laravelApp(t), 1)
	alice, bob := newBrowser(s.URL), newBrowser(s.URL)

	if r := must(t)(alice.get("/")); !bytes.Contains(r.Body, []byte("Hello, guest!")) {
		t.Fatalf("home: %d %q", r.Status, r.Body)
	}
	// Validation redirect: the errors and the old input come back through the session.
	token, err := alice.token("/login")
	if err != nil {
		t.Fatal(err)
	}
	r := must(t)(alice.post("/login", url.Values{"_token": {token}, "email": {"not-an-email"}, "password": {""}}))
	if r.Status != http.StatusFound || !strings.HasSuffix(r.Header.Get("Location"), "/login") {
		t.Fatalf("invalid login: %d to %q", r.Status, r.Header.Get("Location"))
	}
	page := string(must(t)(alice.get("/login")).Body)
	for _, want := range []string{"The email must be a valid email address.", "The password field is required.", `value="not-an-email"`} {
		if !strings.Contains(page, want) {
			t.Errorf("login page after the invalid attempt lacks %q:\n%s", want, page)
		}
	}
	if page := string(must(t)(bob.get("/login")).Body); strings.Contains(page, "not-an-email") || strings.Contains(page, "required") {
		t.Errorf("bob's login page shows alice's errors or input:\n%s", page)
	}
	token, _ = alice.token("/login")
	r = must(t)(alice.post("/login", url.Values{"_token": {token}, "email": {"alice@example.com"}, "password": {"wrong"}}))
	if page := string(must(t)(alice.get("/login")).Body); !strings.Contains(page, "These credentials do not match") {
		t.Errorf("wrong password: no error on the login page:\n%s", page)
	}

	if err := alice.login("alice@example.com"); err != nil {
		t.Fatal(err)
	}
	if page := string(must(t)(alice.get("/dashboard")).Body); !strings.Contains(page, "Welcome back, Alice!") || !strings.Contains(page, "Alice's notes") {
		t.Errorf("dashboard after login lacks the flash or the name:\n%s", page)
	}
	if page := string(must(t)(alice.get("/dashboard")).Body); strings.Contains(page, "Welcome back") {
		t.Errorf("the flash message shows twice:\n%s", page)
	}
	if r := must(t)(bob.get("/dashboard")); r.Status != http.StatusFound || !strings.HasSuffix(r.Header.Get("Location"), "/login") {
		t.Errorf("bob, not logged in, got the dashboard: %d %q", r.Status, r.Header.Get("Location"))
	}

	// Eloquent: a note of alice's, not in bob's list.
	token, _ = alice.token("/dashboard")
	if r := must(t)(alice.post("/notes", url.Values{"_token": {token}, "text": {"alice's secret note"}})); r.Status != http.StatusFound {
		t.Fatalf("POST /notes: %d %q", r.Status, r.Body)
	}
	if page := string(must(t)(alice.get("/dashboard")).Body); !strings.Contains(page, "alice&#039;s secret note") {
		t.Errorf("alice's note is not on her dashboard:\n%s", page)
	}
	if err := bob.login("bob@example.com"); err != nil {
		t.Fatal(err)
	}
	if page := string(must(t)(bob.get("/dashboard")).Body); strings.Contains(page, "secret note") || !strings.Contains(page, "Bob's notes") {
		t.Errorf("bob's dashboard:\n%s", page)
	}

	// An upload, checked by its hash.
	token, _ = alice.token("/dashboard")
	content := bytes.Repeat([]byte("peregrine upload\n"), 1000)
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	_ = mw.WriteField("_token", token)
	fw, _ := mw.CreateFormFile("file", "notes.txt")
	_, _ = fw.Write(content)
	_ = mw.Close()
	r = must(t)(alice.do(http.MethodPost, "/upload", &body, "Content-Type", mw.FormDataContentType(), "Accept", "application/json"))
	sum := sha1.Sum(content)
	var up struct {
		Name string `json:"name"`
		Size int    `json:"size"`
		Sha1 string `json:"sha1"`
	}
	if err := json.Unmarshal(r.Body, &up); err != nil || up.Sha1 != hex.EncodeToString(sum[:]) || up.Size != len(content) || up.Name != "notes.txt" {
		t.Errorf("upload: %d %q (%v)", r.Status, r.Body, err)
	}

	// The JSON API reads php://input; its validation answers 422 in JSON.
	api := newBrowser(s.URL)
	r = must(t)(api.do(http.MethodPost, "/api/notes", strings.NewReader(`{"text":"from the API"}`), "Content-Type", "application/json", "Accept", "application/json"))
	if r.Status != http.StatusCreated || !strings.Contains(string(r.Body), `"text":"from the API"`) {
		t.Errorf("POST /api/notes: %d %q", r.Status, r.Body)
	}
	r = must(t)(api.do(http.MethodPost, "/api/notes", strings.NewReader(`{}`), "Content-Type", "application/json", "Accept", "application/json"))
	if r.Status != http.StatusUnprocessableEntity || !strings.Contains(string(r.Body), "The text field is required.") {
		t.Errorf("POST /api/notes without text: %d %q", r.Status, r.Body)
	}
	if r := must(t)(api.get("/api/notes")); !strings.Contains(string(r.Body), "from the API") {
		t.Errorf("GET /api/notes: %d %q", r.Status, r.Body)
	}

	// A cookie set by one user is that user's only.
	must(t)(alice.get("/theme/dark"))
	if page := string(must(t)(alice.get("/")).Body); !strings.Contains(page, "Theme: dark") {
		t.Errorf("alice's theme cookie did not come back:\n%s", page)
	}
	if page := string(must(t)(newBrowser(s.URL).get("/")).Body); !strings.Contains(page, "Theme: light") || !strings.Contains(page, "Hello, guest!") {
		t.Errorf("a new client's home page:\n%s", page)
	}

	// Static files come from public/, not from PHP.
	if r := must(t)(api.get("/style.css")); r.Status != 200 || !strings.HasPrefix(r.Header.Get("Content-Type"), "text/css") {
		t.Errorf("GET /style.css: %d %q", r.Status, r.Header.Get("Content-Type"))
	}

	token, _ = alice.token("/")
	must(t)(alice.post("/logout", url.Values{"_token": {token}}))
	if w, err := alice.whoami(); err != nil || w.User != nil {
		t.Errorf("after logout alice is %s (%v)", str(w.User), err)
	}
}

// Hundreds of interleaved requests of three logged-in users and of clients with no cookie, on
// two workers: each sees only its own user and session, and a client with no cookie never
// sees anyone's.
func TestLaravelUsersInterleaved(t *testing.T) {
	t.Parallel()
	requireLaravel(t)
	s, _ := serveFramework(t, "laravel", laravelApp(t), 2)
	users := []string{"alice@example.com", "bob@example.com", "carol@example.com"}
	const rounds = 40
	// Laravel 8 writes compiled Blade views in place (not atomically): a worker that includes a
	// view while another writes it renders nothing, under PHP-FPM as here. Deploys compile the
	// views first (artisan view:cache); so does this test, sequentially.
	warm := newBrowser(s.URL)
	for _, path := range []string{"/", "/login", "/whoami"} {
		must(t)(warm.get(path))
	}

	interleaveUsers(t, s.URL, users, rounds, (*browser).login)
}

// interleaveUsers logs users in, each on its own goroutine, and has each load pages and ask who
// it is rounds times, while two clients with no cookie ask the same: every user must see only
// itself and its own visit count, and a client with no cookie nobody and no flash message.
func interleaveUsers(t *testing.T, base string, users []string, rounds int, login func(*browser, string) error) {
	t.Helper()
	errs := make(chan error, 1000)
	var wg sync.WaitGroup
	for _, user := range users {
		wg.Add(1)
		go func(user string) {
			defer wg.Done()
			b := newBrowser(base)
			if err := login(b, user); err != nil {
				errs <- err
				return
			}
			for i := 1; i <= rounds; i++ {
				if _, err := b.get("/"); err != nil {
					errs <- err
					return
				}
				w, err := b.whoami()
				if err != nil {
					errs <- err
					return
				}
				if str(w.User) != user || w.Visits != i {
					errs <- fmt.Errorf("%s, round %d: /whoami says user %s, %d visits", user, i, str(w.User), w.Visits)
				}
			}
		}(user)
	}
	for g := 0; g < 2; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < rounds*2; i++ {
				w, err := newBrowser(base).whoami()
				if err != nil {
					errs <- err
					return
				}
				if w.User != nil || w.Visits != 0 || w.Flash != nil {
					errs <- fmt.Errorf("a client with no cookie saw user %s, %d visits, flash %s", str(w.User), w.Visits, str(w.Flash))
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	n := 0
	for err := range errs {
		if n++; n <= 20 {
			t.Error(err)
		}
	}
	if n > 20 {
		t.Errorf("... and %d more", n-20)
	}
}

func TestFrameworkFlagErrors(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"serve", "--laravel", "/nonexistent/app"},
		{"serve", "--symfony", "/nonexistent/app"},
		{"serve", "--laravel", ".", "--symfony", "."},
		{"serve", "worker.php", "--laravel", "."},
	} {
		out, code := runCLI(t, t.TempDir(), nil, args...)
		if code != 1 || !strings.Contains(out, "peregrine:") {
			t.Errorf("peregrine %s: exit %d, %q; want exit 1 with a message", strings.Join(args, " "), code, out)
		}
	}
}

// TestSymfonyBootFailureFailsTheStart: the runner boots the kernel before the first request, so
// an app whose container cannot be built makes `serve --symfony` exit 1 with Symfony's error,
// as a worker script that fails at start does, instead of answering every request with 500.
func TestSymfonyBootFailureFailsTheStart(t *testing.T) {
	t.Parallel()
	requireSymfony(t)
	app := symfonyApp(t)
	broken := "<?php\nthrow new RuntimeException('container broken on purpose');\n"
	if err := os.WriteFile(filepath.Join(app, "config", "packages", "broken.php"), []byte(broken), 0o644); err != nil {
		t.Fatal(err)
	}
	out, code := runCLI(t, app, nil, "serve", "--symfony", app, "--address", "127.0.0.1:0")
	if code != 1 || !strings.Contains(out, "container broken on purpose") {
		t.Errorf("serve --symfony with a broken container: exit %d, want 1 with the error; output:\n%s", code, out)
	}
}

func requireSymfony(t *testing.T) {
	t.Helper()
	for _, f := range []string{"Bundle/FrameworkBundle", "Bundle/SecurityBundle", "Component/Runtime", "Component/Dotenv"} {
		if _, err := os.Stat(filepath.Join("/usr/share/php/Symfony", f, "autoload.php")); err != nil {
			t.Skip("Debian's Symfony 5.4 packages are not installed (scripts/setup.sh installs them)")
		}
	}
}

// symfonyApp returns a fresh copy of examples/symfony with the probes of
// testdata/frameworks/symfony laid over it.
func symfonyApp(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	copyTree(t, filepath.Join(repoRoot(t), "examples", "symfony"), dir)
	copyTree(t, filepath.Join(repoRoot(t), "testdata", "frameworks", "symfony"), dir)
	return dir
}

// symfonyLogin logs the browser in through the security component's form login.
func (b *browser) symfonyLogin(user string) error {
	r, err := b.post("/login", url.Values{"_username": {user}, "_password": {"secret"}})
	if err != nil {
		return err
	}
	if r.Status != http.StatusFound || !strings.HasSuffix(r.Header.Get("Location"), "/account") {
		return fmt.Errorf("login %s: %d to %q", user, r.Status, r.Header.Get("Location"))
	}
	return nil
}

// Services tagged kernel.reset (here one of the app's, and the security token storage) are
// reset between requests, even after a controller called exit().
func TestSymfonyStateDoesNotCarryOver(t *testing.T) {
	t.Parallel()
	requireSymfony(t)
	s, _ := serveFramework(t, "symfony", symfonyApp(t), 1)
	probes := []struct{ name, set, setWant, read, want string }{
		{"a kernel.reset service", "/probe/memo/set?v=A", "A", "/probe/memo/get", "none"},
		{"the security token", "/probe/token/set?v=alice", "alice", "/probe/token/get", "nobody"},
		{"exit() in a controller", "/probe/exit", "bye", "/probe/memo/get", "none"},
		{"a kernel.reset service after an exit()", "/probe/memo/set?v=B", "B", "/probe/memo/get", "none"},
	}
	for _, p := range probes {
		if r := must(t)(newBrowser(s.URL).get(p.set)); r.Status != 200 || string(r.Body) != p.setWant {
			t.Fatalf("%s: user A's %s: %d %q, want %q", p.name, p.set, r.Status, r.Body, p.setWant)
		}
		if got := string(must(t)(newBrowser(s.URL).get(p.read)).Body); got != p.want {
			t.Errorf("%s: after user A's %s, a new client's %s = %q, want %q", p.name, p.set, p.read, got, p.want)
		}
	}
}

// A StreamedResponse and a BinaryFileResponse arrive whole, the JSON API reads php://input,
// flash messages show once, static files come from public/, kernel.terminate runs after the
// answer.
func TestSymfonyResponses(t *testing.T) {
	t.Parallel()
	requireSymfony(t)
	dir := symfonyApp(t)
	s, probes := serveFramework(t, "symfony", dir, 1)
	b := newBrowser(s.URL)

	for i := 0; i < 3; i++ {
		if r := must(t)(b.get("/stream")); r.Status != 200 || string(r.Body) != "one\ntwo\nthree\n" {
			t.Fatalf("StreamedResponse: %d %q", r.Status, r.Body)
		}
	}
	report, err := os.ReadFile(filepath.Join(dir, "templates", "report.txt"))
	if err != nil {
		t.Fatal(err)
	}
	r := must(t)(b.get("/download"))
	if r.Status != 200 || !bytes.Equal(r.Body, report) || !strings.Contains(r.Header.Get("Content-Disposition"), "report.txt") {
		t.Errorf("BinaryFileResponse: %d, %d bytes of %d, Content-Disposition %q", r.Status, len(r.Body), len(report), r.Header.Get("Content-Disposition"))
	}
	r = must(t)(b.do(http.MethodPost, "/api/echo", strings.NewReader(`{"text":"héllo"}`), "Content-Type", "application/json"))
	if r.Status != http.StatusCreated || string(r.Body) != `{"text":"h\u00e9llo","length":5}` {
		t.Errorf("POST /api/echo: %d %q", r.Status, r.Body)
	}
	if r := must(t)(b.do(http.MethodPost, "/api/echo", strings.NewReader(`[]`), "Content-Type", "application/json")); r.Status != http.StatusUnprocessableEntity {
		t.Errorf("POST /api/echo with no text: %d %q", r.Status, r.Body)
	}
	if r := must(t)(b.get("/style.css")); r.Status != 200 || !strings.HasPrefix(r.Header.Get("Content-Type"), "text/css") {
		t.Errorf("GET /style.css: %d %q", r.Status, r.Header.Get("Content-Type"))
	}

	alice := newBrowser(s.URL)
	if err := alice.symfonyLogin("alice"); err != nil {
		t.Fatal(err)
	}
	if r := must(t)(alice.get("/account")); !strings.Contains(string(r.Body), "Account of alice") {
		t.Fatalf("alice's account: %d %q", r.Status, r.Body)
	}
	if page := string(must(t)(newBrowser(s.URL).get("/")).Body); strings.Contains(page, "visited your account") || !strings.Contains(page, "Hello, anonymous!") {
		t.Errorf("a new client's home page shows alice's flash or name:\n%s", page)
	}
	if page := string(must(t)(alice.get("/")).Body); !strings.Contains(page, "You visited your account.") || !strings.Contains(page, "Hello, alice!") {
		t.Errorf("alice's flash is not on her home page:\n%s", page)
	}
	if page := string(must(t)(alice.get("/")).Body); strings.Contains(page, "visited your account") {
		t.Errorf("alice's flash shows twice:\n%s", page)
	}
	if r := must(t)(newBrowser(s.URL).get("/account")); r.Status != http.StatusFound {
		t.Errorf("a new client's /account: %d, want a redirect to the login", r.Status)
	}
	r = must(t)(newBrowser(s.URL).post("/login", url.Values{"_username": {"alice"}, "_password": {"wrong"}}))
	if r.Status != http.StatusFound || !strings.HasSuffix(r.Header.Get("Location"), "/login") {
		t.Errorf("a wrong password: %d to %q", r.Status, r.Header.Get("Location"))
	}

	file := filepath.Join(probes, "terminate-t1")
	if r := must(t)(b.get("/probe/after?token=t1")); r.Status != 200 || string(r.Body) != "answered before kernel.terminate" {
		t.Fatalf("GET /probe/after: %d %q", r.Status, r.Body)
	}
	if got, _ := os.ReadFile(file); len(got) != 0 {
		t.Fatalf("kernel.terminate ran before the answer arrived: %q", got)
	}
	if err := os.WriteFile(filepath.Join(probes, "go-t1"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "kernel.terminate", func() bool {
		got, _ := os.ReadFile(file)
		return len(got) > 0
	})
	must(t)(b.get("/hello"))
	if got, _ := os.ReadFile(file); string(got) != "terminate go\n" {
		t.Errorf("kernel.terminate wrote %q, want \"terminate go\\n\" once", got)
	}
}

// Three users logged in through the security component and clients with no cookie,
// interleaved on two workers: each sees its own user and session only.
func TestSymfonyUsersInterleaved(t *testing.T) {
	t.Parallel()
	requireSymfony(t)
	s, _ := serveFramework(t, "symfony", symfonyApp(t), 2)
	interleaveUsers(t, s.URL, []string{"alice", "bob", "carol"}, 40, (*browser).symfonyLogin)
}

// workers.debug_leaks names, after each request, the static state the sandbox cannot reset
// (here a static array of the app's own that a request filled) and what the sandbox did reset.
func TestLaravelLeakReport(t *testing.T) {
	t.Parallel()
	requireLaravel(t)
	s, _ := serveFramework(t, "laravel", laravelApp(t), 1, "debug_leaks: true")
	must(t)(newBrowser(s.URL).get("/probe/config/get")) // first use of the classes
	must(t)(newBrowser(s.URL).get("/probe/static/set?v=A"))
	must(t)(newBrowser(s.URL).get("/probe/view/set?v=A"))
	s.log.waitFor(t, `request 2 left behind: App\\+Probe\\+Registry::\$seen;`, 30*time.Second)
	s.log.waitFor(t, `request 3 left behind: nothing; reset by the sandbox: [^"]*View\\+Factory::\$shared`, 30*time.Second)
	s.log.waitFor(t, `request 3 [^"]*; memory \d+ bytes`, 30*time.Second)
}

// workers.debug_leaks names, after each request of a Symfony app, the static state no reset puts
// back (a static array of the app's own a controller filled); without the key, nothing is logged.
func TestSymfonyLeakReport(t *testing.T) {
	t.Parallel()
	requireSymfony(t)
	requests := []string{"/probe/memo/get", "/probe/static/set?v=A", "/probe/memo/get"}

	s, _ := serveFramework(t, "symfony", symfonyApp(t), 1, "debug_leaks: true")
	for _, path := range requests {
		must(t)(newBrowser(s.URL).get(path))
	}
	// Request 1 also lists what the container's compilation filled once.
	s.log.waitFor(t, `request 2 left behind: App\\+Probe\\+Registry::\$seen; memory \d+ bytes \([+-]\d+\)`, 30*time.Second)
	s.log.waitFor(t, `request 3 left behind: nothing; memory \d+ bytes \([+-]\d+\)`, 30*time.Second)

	quiet, _ := serveFramework(t, "symfony", symfonyApp(t), 1)
	for _, path := range append(requests, "/probe/mark?v=end") {
		must(t)(newBrowser(quiet.URL).get(path))
	}
	// The worker wrote its report of the requests before (if any) ahead of the mark.
	quiet.log.waitFor(t, `probe mark end`, 30*time.Second)
	if n := quiet.log.count(`peregrine leaks`); n != 0 {
		t.Errorf("without workers.debug_leaks the worker logged %d leak reports:\n%s", n, quiet.log.String())
	}
}

// TestWorkerLeakReport: workers.debug_leaks covers a plain Peregrine\Worker too, on both
// runtimes: the report names the static property a request changed, after the application's
// own reset hooks, and a request that changes nothing leaves nothing behind.
func TestWorkerLeakReport(t *testing.T) {
	t.Parallel()
	src := "<?php\ndeclare(strict_types=1);\nrequire " + strconv.Quote(filepath.Join(repoRoot(t), "php", "autoload.php")) + ";\n" + `
final class Registry { public static array $seen = []; public static int $resets = 0; }
Peregrine\Worker::create()
    ->onReset(static function (): void { Registry::$resets = 0; })
    ->serve(static function (Peregrine\Http\Request $request): Peregrine\Http\Response {
        Registry::$resets++; // put back by the hook: never reported
        if ($request->query !== '') {
            Registry::$seen[] = $request->query;
        }
        return new Peregrine\Http\Response(200, [], 'ok');
    });
`
	script := filepath.Join(t.TempDir(), "worker.php")
	if err := os.WriteFile(script, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, runtime := range []string{"native", "cli"} {
		t.Run(runtime, func(t *testing.T) {
			t.Parallel()
			s := startServer(t, fmt.Sprintf("workers:\n  command: php %s\n  runtime: %s\n  count: 1\n  debug_leaks: true\n", script, runtime))
			for _, path := range []string{"/", "/?a", "/"} {
				if r := get(t, s.URL+path); r.Status != 200 {
					t.Fatalf("GET %s: %d %q", path, r.Status, r.Body)
				}
			}
			s.log.waitFor(t, `request 2 left behind: Registry::\$seen; memory \d+ bytes`, 30*time.Second)
			s.log.waitFor(t, `request 3 left behind: nothing; memory \d+ bytes`, 30*time.Second)
		})
	}
}

// A PSR-7 application that knows nothing of Peregrine's own types: examples/slim through
// servePsr on the native runtime.
func TestSlimExample(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/usr/share/php/Slim/autoload.php"); err != nil {
		t.Skip("php-slim is not installed (scripts/setup.sh installs it)")
	}
	s := startServer(t, fmt.Sprintf("workers:\n  runtime: native\n  count: 1\n  command: php %s\n", filepath.Join(repoRoot(t), "examples", "slim", "worker.php")))
	b := newBrowser(s.URL)
	for i := 1; i <= 3; i++ {
		if r := must(t)(b.get("/")); !strings.Contains(string(r.Body), fmt.Sprintf("has served %d requests", i)) {
			t.Errorf("GET / number %d: %d %q", i, r.Status, r.Body)
		}
	}
	if r := must(t)(b.get("/hello/peregrine")); r.Status != 200 || string(r.Body) != "Hello, peregrine!" {
		t.Errorf("GET /hello/peregrine: %d %q", r.Status, r.Body)
	}
	r := must(t)(b.do(http.MethodPost, "/api/echo", strings.NewReader(`{"a":[1,2]}`), "Content-Type", "application/json"))
	if r.Status != http.StatusCreated || string(r.Body) != `{"received":{"a":[1,2]}}` {
		t.Errorf("POST /api/echo: %d %q", r.Status, r.Body)
	}
	if r := must(t)(b.get("/nowhere")); r.Status != http.StatusNotFound {
		t.Errorf("GET /nowhere: %d", r.Status)
	}
}

// journeyStep is one request of a comparison journey. who is the browser that sends it: one
// of its own per name, keeping its cookies, but "anon" is a new client with no cookie each
// time. A POST with no contentType is a form (body url-encoded) and "multipart" a form with a
// file "file" (notes.txt, uploadContent); either gets the CSRF token of journey.csrf.
type journeyStep struct {
	who, method, path, body, contentType string
	// cookie is a Cookie header of its own, sent besides the browser's; RANDOM in it is
	// replaced by a value new to each request (PHP's session files are shared by all servers).
	cookie string
}

// journey is a list of steps and what a browser adds to them.
type journey struct {
	steps   []journeyStep
	headers []string // sent with every request (name, value, ...)
	// csrf, when set, returns the token a form step sends as its _token field: what the page
	// the user fills the form in holds.
	csrf func(b *browser, st journeyStep) (string, error)
}

// uploadContent is the file of a "multipart" step.
var uploadContent = bytes.Repeat([]byte("peregrine upload\n"), 1000)

// laravelJourney: three clients through the example and a few probes: logins right and
// wrong, validation errors, flash, Eloquent notes, an upload, a session cookie the client made
// up, a form without its CSRF token, the JSON API and its 422, a cookie, probes that change
// state, a static file, a 404, HEAD, /index.php/..., logout.
var laravelJourney = journey{
	steps: []journeyStep{
		{who: "anon", method: "GET", path: "/"},
		{who: "alice", method: "GET", path: "/login"},
		{who: "alice", method: "POST", path: "/login", body: "email=nope&password="},
		{who: "alice", method: "GET", path: "/login"},
		{who: "bob", method: "GET", path: "/login"},
		{who: "alice", method: "POST", path: "/login", body: "email=alice%40example.com&password=secret"},
		{who: "alice", method: "GET", path: "/dashboard"},
		{who: "alice", method: "GET", path: "/dashboard"},
		{who: "alice", method: "POST", path: "/notes", body: "text=first+note"},
		{who: "alice", method: "GET", path: "/dashboard"},
		{who: "alice", method: "POST", path: "/notes", body: "text="},
		{who: "alice", method: "GET", path: "/dashboard"},
		{who: "alice", method: "POST", path: "/upload", contentType: "multipart"},
		{who: "bob", method: "GET", path: "/whoami"},
		{who: "anon", method: "GET", path: "/whoami", cookie: "laravel_session=chosen-by-an-attacker-RANDOM"},
		{who: "bob", method: "GET", path: "/dashboard"},
		{who: "alice", method: "GET", path: "/theme/dark"},
		{who: "alice", method: "GET", path: "/"},
		{who: "anon", method: "GET", path: "/"},
		{who: "anon", method: "POST", path: "/api/notes", body: `{"text":"api note"}`, contentType: "application/json"},
		{who: "anon", method: "POST", path: "/api/notes", body: `{}`, contentType: "application/json"},
		{who: "anon", method: "GET", path: "/api/notes"},
		{who: "alice", method: "GET", path: "/probe/config/set?v=changed"},
		{who: "bob", method: "GET", path: "/probe/config/get"},
		{who: "alice", method: "GET", path: "/probe/locale/set?v=fr"},
		{who: "bob", method: "GET", path: "/probe/locale/get"},
		{who: "alice", method: "GET", path: "/probe/view/set?v=A"},
		{who: "bob", method: "GET", path: "/probe/view/get"},
		{who: "anon", method: "GET", path: "/style.css"},
		{who: "anon", method: "GET", path: "/no/such/page"},
		{who: "anon", method: "HEAD", path: "/"},
		// A form posted without its CSRF token: 419.
		{who: "bob", method: "POST", path: "/notes", body: "text=forged", contentType: "application/x-www-form-urlencoded"},
		{who: "anon", method: "GET", path: "/index.php"},
		{who: "bob", method: "GET", path: "/index.php/whoami"},
		{who: "anon", method: "GET", path: "/index.php/api/hello?x=1"},
		{who: "alice", method: "POST", path: "/logout", body: ""},
		{who: "alice", method: "GET", path: "/whoami"},
	},
	headers: []string{"Accept", "text/html"},
	csrf: func(b *browser, st journeyStep) (string, error) {
		form := "/" // a logged-in user's /login redirects; the home page has a form then
		if st.path == "/login" {
			form = "/login"
		}
		return b.token(form)
	},
}

// symfonyJourney: the same for the Symfony example (its forms have no CSRF token): logins
// right and wrong, flash, the security token per user, a session id the client chose, the JSON
// API and its 422, a StreamedResponse, a BinaryFileResponse, a kernel.reset service, a static
// file, a 404, HEAD, /index.php/..., logout.
var symfonyJourney = journey{steps: []journeyStep{
	{"anon", "GET", "/", "", "", ""},
	{"alice", "GET", "/account", "", "", ""},
	{"alice", "POST", "/login", "_username=alice&_password=wrong", "", ""},
	{"alice", "GET", "/login", "", "", ""},
	{"bob", "GET", "/login", "", "", ""},
	{"alice", "POST", "/login", "_username=alice&_password=secret", "", ""},
	{"alice", "GET", "/account", "", "", ""},
	{"alice", "GET", "/", "", "", ""},
	{"alice", "GET", "/", "", "", ""},
	{"bob", "GET", "/whoami", "", "", ""},
	{"anon", "GET", "/whoami", "", "", ""},
	// A session id the client chose (fixation): PHP's strict mode, which the framework turns
	// on, gives it a new one.
	{"anon", "GET", "/", "", "", "PHPSESSID=chosen-by-an-attacker-RANDOM"},
	{"bob", "POST", "/login", "_username=bob&_password=secret", "", ""},
	{"bob", "GET", "/whoami", "", "", ""},
	{"alice", "GET", "/whoami", "", "", ""},
	{"anon", "POST", "/api/echo", `{"text":"x"}`, "application/json", ""},
	{"anon", "POST", "/api/echo", `{}`, "application/json", ""},
	{"anon", "GET", "/stream", "", "", ""},
	{"anon", "GET", "/download", "", "", ""},
	{"alice", "GET", "/probe/memo/set?v=A", "", "", ""},
	{"bob", "GET", "/probe/memo/get", "", "", ""},
	{"anon", "GET", "/style.css", "", "", ""},
	{"anon", "GET", "/no/such/page", "", "", ""},
	{"anon", "HEAD", "/", "", "", ""},
	{"anon", "GET", "/index.php", "", "", ""},
	{"alice", "GET", "/index.php/whoami", "", "", ""},
	{"anon", "GET", "/index.php/hello", "", "", ""},
	{"alice", "GET", "/logout", "", "", ""},
	{"alice", "GET", "/whoami", "", "", ""},
}}

var csrfFieldRE = regexp.MustCompile(`(name="_token" value=")[^"]+`)

// answerHeaders are left out of an answer: they describe the connection or the server, not
// the application's answer (nginx sends a body of unknown length chunked where Go counts it).
// Set-Cookie is compared cookie by cookie.
var answerHeaders = map[string]bool{"Date": true, "Server": true, "Connection": true, "Keep-Alive": true,
	"Content-Length": true, "Transfer-Encoding": true, "Set-Cookie": true}

// httpDateRE matches an HTTP date (Expires: now, Last-Modified).
var httpDateRE = regexp.MustCompile(`[A-Z][a-z]{2}, \d{2} [A-Z][a-z]{2} \d{4} \d{2}:\d{2}:\d{2} GMT`)

// answer is what one step got, normalised so that two servers' answers compare equal when
// they are the same answer: base is URL everywhere, CSRF tokens are TOKEN, a date within a
// minute of the request is (now) (Expires: now); ETag and Last-Modified count by their
// presence (they come from a file's inode and time, which differ between two copies); a
// cookie is its name, attributes and whether its value is the one the request sent (never the
// value itself, random in every server); Max-Age is counted at the second the cookie is made,
// so only whether the cookie expires later or is deleted is kept.
type answer struct {
	step    string
	status  int
	headers map[string]string
	cookies []string
	body    string
}

func (a answer) String() string {
	var h []string
	for name, v := range a.headers {
		h = append(h, name+": "+v)
	}
	sort.Strings(h)
	return fmt.Sprintf("%s -> %d\n%s\ncookies %v\n\n%s", a.step, a.status, strings.Join(h, "\n"), a.cookies, a.body)
}

// walk sends the journey's steps to base and returns what each got.
func (j journey) walk(t *testing.T, base string) []answer {
	t.Helper()
	browsers := map[string]*browser{}
	var answers []answer
	for _, st := range j.steps {
		b := browsers[st.who]
		if b == nil {
			b = newBrowser(base)
			if st.who != "anon" {
				browsers[st.who] = b
			}
		}
		body, ct := st.body, st.contentType
		if st.method == http.MethodPost && (ct == "" || ct == "multipart") {
			token := ""
			if j.csrf != nil {
				var err error
				if token, err = j.csrf(b, st); err != nil {
					t.Fatalf("%s %s: %v", base, st.path, err)
				}
			}
			body, ct = formBody(t, token, st)
		}
		var rd io.Reader
		if st.method == http.MethodPost {
			rd = strings.NewReader(body)
		}
		headers := append([]string{"Content-Type", ct}, j.headers...)
		cookie := strings.ReplaceAll(st.cookie, "RANDOM", randomTag())
		if cookie != "" {
			headers = append(headers, "Cookie", cookie)
		}
		start := time.Now()
		r := must(t)(b.do(st.method, st.path, rd, headers...))
		a := answer{step: fmt.Sprintf("%s %s %s", st.who, st.method, st.path), status: r.Status, headers: map[string]string{},
			body: strings.ReplaceAll(csrfFieldRE.ReplaceAllString(string(r.Body), "${1}TOKEN"), base, "URL")}
		for name, values := range r.Header {
			switch {
			case answerHeaders[name]:
			case name == "Etag" || name == "Last-Modified":
				a.headers[name] = "(set)"
			default:
				a.headers[name] = httpDateRE.ReplaceAllStringFunc(strings.ReplaceAll(strings.Join(values, ", "), base, "URL"), func(d string) string {
					if at, err := http.ParseTime(d); err == nil && at.Sub(start).Abs() < time.Minute {
						return "(now)"
					}
					return d
				})
			}
		}
		for _, c := range (&http.Response{Header: r.Header}).Cookies() {
			value := "new"
			if strings.Contains(cookie, c.Name+"="+c.Value) {
				value = "as sent"
			}
			a.cookies = append(a.cookies, fmt.Sprintf("%s value=%s path=%s httponly=%v samesite=%v expires=%v", c.Name, value, c.Path, c.HttpOnly, c.SameSite, c.MaxAge > 0))
		}
		answers = append(answers, a)
	}
	return answers
}

// formBody returns the body and Content-Type of a form step: its url-encoded fields after
// _token, or for "multipart" the same fields and the file.
func formBody(t *testing.T, token string, st journeyStep) (string, string) {
	t.Helper()
	fields, err := url.ParseQuery(st.body)
	if err != nil {
		t.Fatalf("%s: %v", st.body, err)
	}
	if st.contentType != "multipart" {
		body := st.body
		if token != "" {
			body = "_token=" + url.QueryEscape(token) + "&" + body
		}
		return body, "application/x-www-form-urlencoded"
	}
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	if token != "" {
		fields.Set("_token", token)
	}
	for name := range fields {
		_ = mw.WriteField(name, fields.Get(name))
	}
	fw, _ := mw.CreateFormFile("file", "notes.txt")
	_, _ = fw.Write(uploadContent)
	_ = mw.Close()
	return buf.String(), mw.FormDataContentType()
}

// compareAnswers fails the test for each step whose answer differs from the reference's, once
// the known differences of Peregrine's own are set aside in both (knownDifferences).
func compareAnswers(t *testing.T, refName string, ref []answer, name string, got []answer) {
	t.Helper()
	for i := range ref {
		knownDifferences(&ref[i], &got[i])
		if r, g := ref[i].String(), got[i].String(); r != g {
			t.Errorf("step %d differs.\n%s:\n%s\n\n%s:\n%s", i, refName, r, name, g)
		}
	}
}

// knownDifferences takes out of ref (nginx + PHP-FPM, or classic mode) and got (Peregrine)
// what Peregrine answers differently on purpose (docs/compatibility.md):
//   - Compression (http.compression, on by default): a compressible answer from PHP carries
//     Vary: Accept-Encoding, and a compressed one has no Accept-Ranges (a range of the identity
//     bytes would not fit the compressed ones; nginx's gzip drops it too). nginx here runs
//     without gzip. The Go client decompresses, so the bodies still compare.
func knownDifferences(ref, got *answer) {
	if vary := got.headers["Vary"]; strings.Contains(vary, "Accept-Encoding") && !strings.Contains(ref.headers["Vary"], "Accept-Encoding") {
		vary = strings.Trim(strings.ReplaceAll(strings.ReplaceAll(vary, "Accept-Encoding", ""), ", , ", ", "), ", ")
		if vary == "" {
			delete(got.headers, "Vary")
		} else {
			got.headers["Vary"] = vary
		}
		if _, ok := got.headers["Accept-Ranges"]; !ok {
			delete(ref.headers, "Accept-Ranges")
		}
	}
}

// answersAsFPM walks the journey of flag's framework ("laravel" or "symfony") against worker
// mode (serve --FLAG) and against each reference (a subtest each), each on a fresh copy of the
// app, and compares the answers.
func answersAsFPM(t *testing.T, flag string) {
	app := frameworkApps[flag]
	app.require(t)
	for _, ref := range []reference{classicMode, nginxFPM} {
		t.Run(ref.name, func(t *testing.T) {
			t.Parallel()
			base := ref.start(t, app.copy(t))
			worker, _ := serveFramework(t, flag, app.copy(t), 1)
			compareAnswers(t, ref.name, app.journey.walk(t, base), "--"+flag, app.journey.walk(t, worker.URL))
		})
	}
}

// frameworkApps are the apps worker mode serves, by flag.
var frameworkApps = map[string]struct {
	require func(*testing.T)
	copy    func(*testing.T) string // a fresh copy of the app: its directory
	journey journey
}{
	"laravel": {requireLaravel, laravelApp, laravelJourney},
	"symfony": {requireSymfony, symfonyApp, symfonyJourney},
}

// reference is what worker mode is compared with: start serves the app in dir and returns the
// base URL.
type reference struct {
	name  string
	start func(t *testing.T, dir string) string
}

// classicMode: --root public, public/index.php for every request (PHP-FPM's model).
var classicMode = reference{"classic mode", func(t *testing.T, dir string) string {
	s, _ := serveFramework(t, "root", filepath.Join(dir, "public"), 1)
	return s.URL
}}

// nginxFPM: the yardstick itself, real nginx + php-fpm8.2 running public/index.php
// (startNginxFPM).
var nginxFPM = reference{"nginx + PHP-FPM", func(t *testing.T, dir string) string {
	requireNginxFPM(t)
	return startNginxFPM(t, filepath.Join(dir, "public"))
}}

// The same requests, in the same order, answered by --laravel (worker mode, sandboxed), by
// classic mode and by nginx + PHP-FPM: the answers are the same, once CSRF tokens, cookie
// values (random in all) and the other differences walk and knownDifferences name are set
// aside.
func TestLaravelAnswersAsFPM(t *testing.T) {
	t.Parallel()
	answersAsFPM(t, "laravel")
}

// The same for Symfony.
func TestSymfonyAnswersAsFPM(t *testing.T) {
	t.Parallel()
	answersAsFPM(t, "symfony")
}
