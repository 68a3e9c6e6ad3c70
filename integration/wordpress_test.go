package integration

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"
)

// WordPress 6.1 from Debian's `wordpress` package, unmodified, in classic mode (issue 12): the
// journey a new user takes, from the installer to the feed, each step checked for what nginx +
// PHP-FPM answer.
//
// Compared with real nginx 1.22 + php8.2-fpm: when both are installed (bench/setup.sh installs
// them; PEREGRINE_WP_FPM=0 turns this off), the test also runs the same journey on nginx (Debian's
// snippets/fastcgi-php.conf, `try_files $uri $uri/ /index.php?$query_string`) + php-fpm8.2 (pm
// static, 2 children), started as child processes with the configuration approach of
// bench/cmd/bench/systems.go, on a second site and database, and compares every step: status,
// Content-Type, Location, the names and paths of the cookies set, the presence of ETag,
// Last-Modified and Cache-Control, X-WP-Total, and the body markers. Last run (2026-11-23): all 30
// steps the same on both, except the two differences listed in wpKnownDifferences; about 2 s per
// journey.

const (
	wpSource   = "/usr/share/wordpress"
	wpTheme    = wpSource + "/wp-content/themes/twentytwentythree"
	wpUser     = "admin"
	wpPassword = "correct-horse-battery-staple-42"
)

// wpSite is a WordPress document root of its own, with its own database.
type wpSite struct {
	dir, db string
}

// mariadbReachable tells whether MariaDB answers on its socket or on 127.0.0.1:3306.
func mariadbReachable() error {
	var last error
	for _, a := range [][2]string{{"unix", "/run/mysqld/mysqld.sock"}, {"tcp", "127.0.0.1:3306"}} {
		c, err := net.DialTimeout(a[0], a[1], 2*time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		last = err
	}
	return last
}

func mysqlExec(sql string) error {
	out, err := exec.Command("mysql", "-uroot", "-e", sql).CombinedOutput()
	if err != nil {
		return fmt.Errorf("mysql -e %q: %v: %s", sql, err, out)
	}
	return nil
}

// newWordPressSite builds a site from Debian's tree: hard links (a copy across file systems) and a
// wp-config.php of its own pointing at a fresh database, dropped when the test ends. Symlinks
// would not do: WordPress finds wp-load.php and wp-config.php through __DIR__, which PHP
// resolves to the real path, so a tree of symlinks would read Debian's /etc/wordpress config.
func newWordPressSite(t *testing.T) wpSite {
	t.Helper()
	for _, f := range []string{wpSource + "/wp-settings.php", wpTheme + "/theme.json"} {
		if _, err := os.Stat(f); err != nil {
			t.Fatalf("%v: install wordpress, wordpress-theme-twentytwentythree and mariadb-client (scripts/setup.sh does)", err)
		}
	}
	if err := mariadbReachable(); err != nil {
		t.Skipf("MariaDB is unreachable (%v): start it (start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd) to run the WordPress journey", err)
	}
	if _, err := exec.LookPath("mysql"); err != nil {
		t.Fatalf("the mysql client is missing: install mariadb-client (scripts/setup.sh does)")
	}
	site := wpSite{dir: filepath.Join(t.TempDir(), "site"), db: "peregrine_wp_" + randomTag()}
	if err := mysqlExec("CREATE DATABASE `" + site.db + "` CHARACTER SET utf8mb4"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := mysqlExec("DROP DATABASE IF EXISTS `" + site.db + "`"); err != nil {
			t.Error(err)
		}
	})
	if err := os.Mkdir(site.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("cp", "-al", wpSource+"/.", site.dir+"/").CombinedOutput(); err != nil {
		t.Logf("hard links failed (%v: %s); copying", err, out)
		if out, err := exec.Command("cp", "-a", wpSource+"/.", site.dir+"/").CombinedOutput(); err != nil {
			t.Fatalf("cp: %v: %s", err, out)
		}
	}
	// Debian's wp-config.php (a hard link to it) goes; the site's own replaces it.
	_ = os.Remove(filepath.Join(site.dir, "wp-config.php"))
	_ = os.Remove(filepath.Join(site.dir, ".htaccess"))
	var c strings.Builder
	c.WriteString("<?php\n")
	fmt.Fprintf(&c, "define('DB_NAME', '%s');\ndefine('DB_USER', 'root');\ndefine('DB_PASSWORD', '');\n", site.db)
	c.WriteString("define('DB_HOST', 'localhost');\ndefine('DB_CHARSET', 'utf8mb4');\ndefine('DB_COLLATE', '');\n")
	for _, k := range []string{"AUTH_KEY", "SECURE_AUTH_KEY", "LOGGED_IN_KEY", "NONCE_KEY", "AUTH_SALT", "SECURE_AUTH_SALT", "LOGGED_IN_SALT", "NONCE_SALT"} {
		fmt.Fprintf(&c, "define('%s', '%s');\n", k, randomTag()+randomTag())
	}
	// No calls to wordpress.org (no network here) and no cron requests to itself: both would make
	// the journey depend on timing.
	c.WriteString("$table_prefix = 'wp_';\ndefine('WP_HTTP_BLOCK_EXTERNAL', true);\ndefine('DISABLE_WP_CRON', true);\n")
	c.WriteString("define('AUTOMATIC_UPDATER_DISABLED', true);\n")
	c.WriteString("if (!defined('ABSPATH')) { define('ABSPATH', __DIR__ . '/'); }\nrequire_once ABSPATH . 'wp-settings.php';\n")
	if err := os.WriteFile(filepath.Join(site.dir, "wp-config.php"), []byte(c.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return site
}

// wpStep is what one step of the journey got, in the terms compared with nginx + PHP-FPM.
type wpStep struct {
	Name        string
	Status      int
	ContentType string
	Location    string   // without scheme and host; the base URL in its query is BASE
	Cookies     []string // names of the cookies set, the site hash taken out
	ETag        bool
	LastMod     bool
	NoCache     bool // Cache-Control present
	Total       string
	Markers     string // the markers the step looked for, and which were there
}

var cookieHash = regexp.MustCompile(`_[0-9a-f]{32}$`)

// wpJourney walks WordPress from its installer to its feed on base and returns each step.
func wpJourney(t *testing.T, base string) []wpStep {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, Timeout: 60 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	var steps []wpStep
	bad := false // a step of this journey failed
	// step sends one request, records it, and checks the status and that each marker is in the body.
	step := func(name, method, path string, body io.Reader, status int, markers []string, headers ...string) (*http.Response, string) {
		t.Helper()
		req, err := http.NewRequest(method, base+path, body)
		if err != nil {
			t.Fatal(err)
		}
		if method == http.MethodPost && len(headers) == 0 {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
		for i := 0; i+1 < len(headers); i += 2 {
			req.Header.Set(headers[i], headers[i+1])
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("%s: %s %s: %v", name, method, path, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		s := wpStep{Name: name, Status: resp.StatusCode, ContentType: resp.Header.Get("Content-Type"),
			Location: strings.ReplaceAll(strings.TrimPrefix(resp.Header.Get("Location"), base), url.QueryEscape(base), "BASE"), ETag: resp.Header.Get("ETag") != "",
			LastMod: resp.Header.Get("Last-Modified") != "", NoCache: resp.Header.Get("Cache-Control") != "",
			Total: resp.Header.Get("X-WP-Total")}
		for _, ck := range resp.Cookies() {
			s.Cookies = append(s.Cookies, cookieHash.ReplaceAllString(ck.Name, "_HASH")+" path="+ck.Path)
		}
		sort.Strings(s.Cookies)
		var found []string
		for _, m := range markers {
			found = append(found, fmt.Sprintf("%q:%v", m, strings.Contains(string(b), m)))
			if !strings.Contains(string(b), m) {
				bad = true
				t.Errorf("%s: %s %s: body lacks %q; status %d, body:\n%.3000s", name, method, path, m, resp.StatusCode, b)
			}
		}
		s.Markers = strings.Join(found, " ")
		if resp.StatusCode != status {
			bad = true
			t.Errorf("%s: %s %s: status %d, want %d; headers %v; body:\n%.3000s", name, method, path, resp.StatusCode, status, resp.Header, b)
		}
		if strings.Contains(string(b), "<?php") {
			t.Errorf("%s: PHP source in the answer", name)
		}
		steps = append(steps, s)
		return resp, string(b)
	}
	form := func(kv ...string) io.Reader {
		v := url.Values{}
		for i := 0; i+1 < len(kv); i += 2 {
			v.Set(kv[i], kv[i+1])
		}
		return strings.NewReader(v.Encode())
	}
	must := func(what, re, body string) string {
		t.Helper()
		m := regexp.MustCompile(re).FindStringSubmatch(body)
		if m == nil {
			t.Fatalf("%s: %s not found in:\n%.3000s", what, re, body)
		}
		return m[1]
	}
	// Installation: WordPress sends a fresh site to its installer, which creates the tables.
	step("front page before install", "GET", "/", nil, 302, nil)
	step("installer", "GET", "/wp-admin/install.php", nil, 200, []string{`name="weblog_title"`, `name="admin_password"`})
	step("install", "POST", "/wp-admin/install.php?step=2", form("weblog_title", "Peregrine Journey", "user_name", wpUser,
		"admin_password", wpPassword, "admin_password2", wpPassword, "pw_weak", "1", "admin_email", "admin@example.com",
		"blog_public", "0", "Submit", "Install WordPress", "language", ""), 200, []string{"<h1>Success!</h1>"})

	// Login: the form sets a test cookie, the POST checks it and sets the auth cookies.
	step("login form", "GET", "/wp-login.php", nil, 200, []string{`name="log"`, `name="pwd"`})
	step("login", "POST", "/wp-login.php", form("log", wpUser, "pwd", wpPassword, "wp-submit", "Log In",
		"redirect_to", base+"/wp-admin/", "testcookie", "1"), 302, nil)
	_, dashboard := step("dashboard", "GET", "/wp-admin/", nil, 200, []string{"<title>Dashboard &lsaquo; Peregrine Journey", `id="wpadminbar"`, "Howdy, <span class=\"display-name\">admin"})
	if bad {
		return steps
	}
	// The admin pages' heartbeat, a POST to admin-ajax.php every minute or so.
	step("heartbeat (admin-ajax)", "POST", "/wp-admin/admin-ajax.php", form("action", "heartbeat", "interval", "60",
		"_nonce", must("heartbeat nonce", `heartbeatSettings\s*=\s*\{[^}]*"nonce":"([0-9a-f]+)"`, dashboard), "screen_id", "dashboard", "has_focus", "false"),
		200, []string{`"wp-auth-check":true`, `"server_time":`})
	// XML-RPC, which answers text/xml (and died with the worker before issue 12).
	step("XML-RPC", "POST", "/xmlrpc.php", strings.NewReader(`<?xml version="1.0"?><methodCall><methodName>demo.sayHello</methodName><params></params></methodCall>`),
		200, []string{"<string>Hello!</string>"}, "Content-Type", "text/xml")

	// Pretty permalinks through the settings form, as a site owner sets them on nginx: from then
	// on every URL without a file goes through index.php (try_files).
	_, page := step("permalink settings", "GET", "/wp-admin/options-permalink.php", nil, 200, []string{`name="permalink_structure"`})
	step("save permalinks", "POST", "/wp-admin/options-permalink.php", form("_wpnonce", must("permalink nonce", `name="_wpnonce" value="([0-9a-f]+)"`, page),
		"_wp_http_referer", "/wp-admin/options-permalink.php", "selection", "/%postname%/", "permalink_structure", "/%postname%/",
		"category_base", "", "tag_base", "", "submit", "Save Changes"), 302, nil)
	// The browser follows the redirect; that page load is what rebuilds the rewrite rules.
	step("permalinks saved", "GET", "/wp-admin/options-permalink.php?settings-updated=true", nil, 200, []string{"Permalink structure updated."})

	// A post written in the admin: the block editor's page creates an auto-draft; its meta box
	// form (post_ID and the update-post nonce) is what the editor posts to wp-admin/post.php.
	_, page = step("new post (editor)", "GET", "/wp-admin/post-new.php", nil, 200, []string{"block-editor", `name='post_ID'`})
	if bad {
		return steps
	}
	postID := must("post_ID", `name='post_ID' value='(\d+)'`, page)
	step("publish (post.php)", "POST", "/wp-admin/post.php", form("_wpnonce", must("update-post nonce", `id="_wpnonce" name="_wpnonce" value="([0-9a-f]+)"`, page),
		"_wp_http_referer", "/wp-admin/post-new.php", "action", "editpost", "originalaction", "editpost", "post_type", "post",
		"post_ID", postID, "original_post_status", "auto-draft", "auto_draft", "1", "post_title", "Written in the admin",
		"content", "<!-- wp:paragraph --><p>Typed into wp-admin.</p><!-- /wp:paragraph -->", "publish", "Publish"), 302, nil)

	// A post through the REST API with cookie auth: the nonce from admin-ajax, as the editor
	// refreshes it.
	_, nonce := step("REST nonce (admin-ajax)", "GET", "/wp-admin/admin-ajax.php?action=rest-nonce", nil, 200, nil)
	if !regexp.MustCompile(`^[0-9a-f]{10}$`).MatchString(nonce) {
		t.Fatalf("rest-nonce: %q", nonce)
	}
	_, created := step("REST create post", "POST", "/wp-json/wp/v2/posts",
		strings.NewReader(`{"title":"Posted through REST","content":"Sent as JSON.","status":"publish"}`),
		201, []string{`"title":{"raw":"Posted through REST"`}, "Content-Type", "application/json", "X-WP-Nonce", nonce)
	var post struct {
		ID   int    `json:"id"`
		Link string `json:"link"`
	}
	if err := json.Unmarshal([]byte(created), &post); err != nil || post.ID == 0 {
		t.Fatalf("REST create post: %v: %.2000s", err, created)
	}
	step("REST list posts", "GET", "/wp-json/wp/v2/posts", nil, 200, []string{"Posted through REST", "Written in the admin"})

	// The public site: the front page, the post's page, a 404, the feed.
	step("front page", "GET", "/", nil, 200, []string{"Posted through REST", "Written in the admin", "Peregrine Journey"})
	step("post page", "GET", strings.TrimPrefix(post.Link, base), nil, 200, []string{"<title>Posted through REST", "Sent as JSON."})
	step("admin post page", "GET", "/written-in-the-admin/", nil, 200, []string{"Typed into wp-admin."})
	step("404", "GET", "/no-such-page-here/", nil, 404, []string{"Page not found", "This page could not be found."})
	step("feed", "GET", "/feed/", nil, 200, []string{"<rss version=\"2.0\"", "<title>Posted through REST</title>", "<title>Written in the admin</title>"})

	// Static files, served by the daemon as nginx serves them: type, validators, 304.
	resp, _ := step("static css", "GET", "/wp-includes/css/dashicons.min.css", nil, 200, []string{"dashicons"})
	if resp.Header.Get("ETag") == "" {
		t.Fatal("static css: no ETag")
	}
	step("static css revalidated", "GET", "/wp-includes/css/dashicons.min.css", nil, 304, nil, "If-None-Match", resp.Header.Get("ETag"))
	step("static js", "GET", "/wp-includes/js/jquery/jquery.min.js", nil, 200, []string{"jQuery"})
	// The admin's concatenated scripts: PHP sets the Etag and answers the revalidation with a
	// 304 of its own (header("HTTP/1.1 304 Not Modified")), without a body.
	scripts := "/wp-admin/load-scripts.php?c=0&load%5Bchunk_0%5D=jquery-core,jquery-migrate,utils&ver=6.1"
	resp, _ = step("load-scripts.php", "GET", scripts, nil, 200, []string{"jQuery"})
	step("load-scripts.php revalidated", "GET", scripts, nil, 304, nil, "If-None-Match", resp.Header.Get("Etag"))
	// HEAD of the front page: the headers of a GET, no body.
	step("front page HEAD", "HEAD", "/", nil, 200, nil)
	// wp-config.php runs (and prints nothing); its source is never sent.
	step("wp-config.php", "GET", "/wp-config.php", nil, 200, nil)

	// Logout: a redirect that expires every auth cookie (several Set-Cookie of one name, on
	// different paths); the dashboard then sends the browser back to the login form.
	logout := must("logout link", `wp-login\.php\?action=logout(?:&amp;|&#038;|&)_wpnonce=([0-9a-f]+)`, dashboard)
	step("logout", "GET", "/wp-login.php?action=logout&_wpnonce="+logout, nil, 302, nil)
	step("dashboard after logout", "GET", "/wp-admin/", nil, 302, nil)
	return steps
}

// wpExpect: the answers that do not depend on the server (both must give them).
var wpExpect = map[string]wpStep{
	"front page before install": {Location: "/wp-admin/install.php"},
	"login":                     {Location: "/wp-admin/"},
	"save permalinks":           {Location: "/wp-admin/options-permalink.php?settings-updated=true"},
	"feed":                      {ContentType: "application/rss+xml; charset=UTF-8"},
	"static css":                {ContentType: "text/css"},
	"REST create post":          {ContentType: "application/json; charset=UTF-8"},
	"404":                       {ContentType: "text/html; charset=UTF-8"},
	"heartbeat (admin-ajax)":    {ContentType: "application/json; charset=UTF-8"},
	"XML-RPC":                   {ContentType: "text/xml; charset=UTF-8"},
	"load-scripts.php":          {ContentType: "application/javascript; charset=UTF-8"},
	"logout":                    {Location: "/wp-login.php?loggedout=true&wp_lang=en_US"},
}

// wpKnownDifferences are where Peregrine answers differently from nginx on purpose, by step:
// it makes both sides' fields equal where the difference is the known one.
//   - Scripts are text/javascript (RFC 9239) where nginx 1.22's mime.types says
//     application/javascript (docs/static.md).
//   - A 304 carries the ETag but not Last-Modified, as Go's net/http sends it and as RFC 9110
//     15.4.5 advises when an ETag is there; nginx repeats Last-Modified. Caches keep the one they
//     have either way.
var wpKnownDifferences = map[string]func(peregrine, nginx *wpStep){
	"static js": func(p, n *wpStep) {
		if strings.HasPrefix(p.ContentType, "text/javascript") && strings.HasPrefix(n.ContentType, "application/javascript") {
			p.ContentType, n.ContentType = "", ""
		}
	},
	"static css revalidated": func(p, n *wpStep) {
		if !p.LastMod && n.LastMod {
			p.LastMod, n.LastMod = false, false
		}
	},
}

func TestWordPressClassic(t *testing.T) {
	t.Parallel()
	site := newWordPressSite(t)
	s := startServer(t, "http:\n  root: "+site.dir+"\nworkers:\n  runtime: native\n  count: 2\n")
	start := time.Now()
	steps := wpJourney(t, s.URL)
	t.Logf("Peregrine: %d steps in %s", len(steps), time.Since(start).Round(time.Millisecond))
	for _, st := range steps {
		t.Logf("  %-26s %d %-32s %s", st.Name, st.Status, st.ContentType, st.Location)
	}
	for _, st := range steps {
		want, ok := wpExpect[st.Name]
		if !ok {
			continue
		}
		if want.Location != "" && st.Location != want.Location {
			t.Errorf("%s: Location %q, want %q", st.Name, st.Location, want.Location)
		}
		if want.ContentType != "" && st.ContentType != want.ContentType {
			t.Errorf("%s: Content-Type %q, want %q", st.Name, st.ContentType, want.ContentType)
		}
	}
	for _, st := range steps {
		if st.Name == "static js" && !strings.HasPrefix(st.ContentType, "text/javascript") {
			t.Errorf("static js: Content-Type %q", st.ContentType)
		}
		if strings.HasPrefix(st.Name, "static") && st.Status == 200 && (!st.ETag || !st.LastMod) {
			t.Errorf("%s: ETag or Last-Modified missing: %+v", st.Name, st)
		}
	}
	if os.Getenv("PEREGRINE_WP_FPM") == "0" {
		return
	}
	if err := nginxFPMInstalled(); err != nil {
		t.Logf("not compared with nginx + PHP-FPM: %v", err)
		return
	}

	// The same journey on nginx + PHP-FPM, step by step.
	fsite := newWordPressSite(t)
	fpmURL := startNginxFPM(t, fsite.dir)
	start = time.Now()
	ref := wpJourney(t, fpmURL)
	t.Logf("nginx + PHP-FPM: %d steps in %s", len(ref), time.Since(start).Round(time.Millisecond))
	if len(ref) != len(steps) {
		t.Fatalf("nginx + PHP-FPM took %d steps, Peregrine %d", len(ref), len(steps))
	}
	for i := range steps {
		a, b := steps[i], ref[i]
		if known, ok := wpKnownDifferences[a.Name]; ok {
			known(&a, &b)
		}
		ja, _ := json.Marshal(a)
		jb, _ := json.Marshal(b)
		if string(ja) != string(jb) {
			t.Errorf("step %q differs:\n  Peregrine:       %s\n  nginx + PHP-FPM: %s", a.Name, ja, jb)
		}
	}
}
