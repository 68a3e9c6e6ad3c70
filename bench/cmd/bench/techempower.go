package main

// The TechEmpower scenario (issue 16, `-only techempower`): TechEmpower Framework Benchmarks'
// six test types (plaintext, JSON, single query, multiple queries, fortunes, updates) from
// examples/techempower, on Peregrine in worker mode (raw, one PDO connection per worker) and on
// nginx + PHP-FPM (the same code in classic style, a persistent PDO connection per child),
// against the local MariaDB and PostgreSQL. Each database gets a database of its own,
// peregrine_bench_tfb_*, with TechEmpower's World (10,000 rows) and Fortune tables
// (examples/techempower/setup.php), dropped at the end. Before any load, verify checks every
// test type's answers on both servers (status, headers, shapes, counts, escaping, updates in the
// database) and the run fails on the first wrong one.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// tfbDB is one database server the scenario runs against.
type tfbDB struct {
	label  string // MariaDB or PostgreSQL
	driver string // mysql or pgsql (PDO's)
	name   string // the benchmark's own database
	dsn    string
	user   string
}

// tfbTest is one of TechEmpower's test types.
type tfbTest struct {
	name     string
	path     string
	usesDB   bool
	pipeline int // requests in flight per connection (TechEmpower pipelines plaintext 16 deep)
}

var tfbTests = []tfbTest{
	{name: "plaintext", path: "/plaintext", pipeline: 16},
	{name: "JSON", path: "/json"},
	{name: "single query", path: "/db", usesDB: true},
	{name: "multiple queries (20)", path: "/queries?queries=20", usesDB: true},
	{name: "fortunes", path: "/fortunes", usesDB: true},
	{name: "updates (20)", path: "/updates?queries=20", usesDB: true},
}

// tfbDatabases lists the database servers running here that PHP can reach, and why others are left out.
func tfbDatabases() (dbs []tfbDB, skipped []string) {
	mods, _ := exec.Command("php", "-m").Output()
	has := func(ext string) bool { return regexp.MustCompile(`(?m)^` + ext + `$`).Match(mods) }
	up := func(addr string) bool {
		c, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err == nil {
			c.Close()
		}
		return err == nil
	}
	suffix := make([]byte, 6)
	_, _ = rand.Read(suffix)
	name := "peregrine_bench_tfb_" + hex.EncodeToString(suffix)
	switch {
	case !has("pdo_mysql"):
		skipped = append(skipped, "MariaDB: PHP's pdo_mysql is missing (apt-get install php8.2-mysql)")
	case exec.Command("mysql", "--version").Run() != nil:
		skipped = append(skipped, "MariaDB: the mysql client is missing (apt-get install mariadb-client)")
	case !up("127.0.0.1:3306"):
		skipped = append(skipped, "MariaDB is not listening on 127.0.0.1:3306")
	default:
		dbs = append(dbs, tfbDB{label: "MariaDB", driver: "mysql", name: name, user: "root",
			dsn: "mysql:host=127.0.0.1;port=3306;dbname=" + name + ";charset=utf8mb4"})
	}
	switch {
	case !has("pdo_pgsql"):
		skipped = append(skipped, "PostgreSQL: PHP's pdo_pgsql is missing (apt-get install php8.2-pgsql)")
	case exec.Command("psql", "--version").Run() != nil:
		skipped = append(skipped, "PostgreSQL: the psql client is missing (apt-get install postgresql-client)")
	case !up("127.0.0.1:5432"):
		skipped = append(skipped, "PostgreSQL is not listening on 127.0.0.1:5432")
	default:
		dbs = append(dbs, tfbDB{label: "PostgreSQL", driver: "pgsql", name: name, user: "postgres",
			dsn: "pgsql:host=127.0.0.1;port=5432;dbname=" + name})
	}
	return dbs, skipped
}

// sql runs one statement in the benchmark's database (or in none, for CREATE and DROP DATABASE)
// with the database's own client, and returns its rows, tab-separated.
func (d tfbDB) sql(inDB bool, stmt string) (string, error) {
	var cmd *exec.Cmd
	if d.driver == "mysql" {
		args := []string{"-uroot", "-h127.0.0.1", "-P3306", "-N", "-B", "-e", stmt}
		if inDB {
			args = append(args, d.name)
		}
		cmd = exec.Command("mysql", args...)
	} else {
		db := "postgres"
		if inDB {
			db = d.name
		}
		cmd = exec.Command("psql", "-h", "127.0.0.1", "-p", "5432", "-U", "postgres", "-d", db, "-v", "ON_ERROR_STOP=1", "-At", "-F", "\t", "-c", stmt)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%s %q: %w: %s", d.label, stmt, err, out)
	}
	return string(out), nil
}

func (d tfbDB) env() map[string]string {
	return map[string]string{"TFB_DSN": d.dsn, "TFB_USER": d.user}
}

// prepare creates the database and TechEmpower's tables in it.
func (l *lab) prepareTFB(d tfbDB) error {
	create := "CREATE DATABASE `" + d.name + "` CHARACTER SET utf8mb4"
	if d.driver == "pgsql" {
		create = "CREATE DATABASE " + d.name + " ENCODING 'UTF8' TEMPLATE template0"
	}
	if _, err := d.sql(false, create); err != nil {
		return err
	}
	out, err := l.php([]string{"TFB_DSN=" + d.dsn, "TFB_USER=" + d.user}, "examples/techempower/setup.php")
	if err != nil {
		d.drop()
		return fmt.Errorf("examples/techempower/setup.php on %s: %w\n%s", d.label, err, out)
	}
	return nil
}

func (d tfbDB) drop() {
	stmt := "DROP DATABASE IF EXISTS `" + d.name + "`"
	if d.driver == "pgsql" {
		stmt = "DROP DATABASE IF EXISTS " + d.name + " WITH (FORCE)"
	}
	if _, err := d.sql(false, stmt); err != nil {
		logf("%v", err)
	}
}

// techempowerScenario measures every test type on both servers, per database; plaintext and
// JSON, which use no database, only with the first.
func (l *lab) techempowerScenario(p plan) ([]*comparison, error) {
	dbs, skipped := tfbDatabases()
	for _, why := range skipped {
		logf("techempower: skipped: %s", why)
	}
	if len(dbs) == 0 {
		return nil, nil
	}
	w, conns, dur := p.classicWorkers, p.helloConns, p.classicDur
	var out []*comparison
	for i, d := range dbs {
		if err := l.prepareTFB(d); err != nil {
			return nil, err
		}
		cs, err := l.techempowerOn(d, i == 0, w, conns, dur, p)
		d.drop()
		out = append(out, cs...)
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

func (l *lab) techempowerOn(d tfbDB, withPlain bool, w, conns int, dur time.Duration, p plan) ([]*comparison, error) {
	logf("techempower: %s, %d workers", d.label, w)
	servers, err := l.startAll(
		func() (*server, error) {
			return l.startPeregrineWith(sysPeregr, peregrineOptions{script: "examples/techempower/worker.php", workers: w, env: d.env(), path: "/plaintext"})
		},
		func() (*server, error) {
			return l.startPeregrineWith(sysDirect, peregrineOptions{script: "examples/techempower/worker.php", workers: w, env: d.env(), path: "/plaintext", direct: true})
		},
		func() (*server, error) {
			// php-fpm.conf is an ini file: the DSN's '=' and ';' need quotes there.
			env := map[string]string{}
			for k, v := range d.env() {
				env[k] = strconv.Quote(v)
			}
			return l.startFPM(sysFPM, fpmOptions{docroot: "examples/techempower", workers: w, backlog: fpmBacklog, env: env, path: "/plaintext"})
		},
	)
	if err != nil {
		return nil, err
	}
	defer l.stopAllServers(servers)
	for _, s := range servers {
		if err := l.verifyTFB(s, d); err != nil {
			return nil, fmt.Errorf("techempower: %s on %s answers wrong: %w", s.name, d.label, err)
		}
		logf("techempower: %s on %s: every answer verified", s.name, d.label)
	}
	script := filepath.Join(l.tmp, "tfb-pipeline.lua")
	if err := os.WriteFile(script, []byte(tfbPipelineLua), 0o644); err != nil {
		return nil, err
	}
	var out []*comparison
	for _, t := range tfbTests {
		if !t.usesDB && !withPlain {
			continue
		}
		load := fmt.Sprintf("wrk -t%d -c%d -d%s", wrkThreads, conns, dur)
		if t.pipeline > 1 {
			load += fmt.Sprintf(", %d pipelined", t.pipeline)
		}
		c := newComparison(p.runs, w, conns, load)
		c.app = t.name
		if t.usesDB {
			c.app += " (" + d.label + ")"
		}
		cell := make([]*server, len(servers))
		for j, s := range servers {
			cs := *s
			cs.url = strings.TrimSuffix(s.url, "/plaintext") + t.path
			cell[j] = &cs
		}
		logf("techempower: %s, %s", c.app, load)
		run := func(s *server, d time.Duration) (result, error) {
			if t.pipeline > 1 {
				return runWrkScript(l.ctx, s.url, conns, d, script, strconv.Itoa(t.pipeline))
			}
			return runWrk(l.ctx, s.url, conns, d)
		}
		err := l.compare(c, cell, func(s *server) error {
			if _, err := run(s, p.warmup); err != nil {
				return err
			}
			l.drain(s, 200*time.Millisecond)
			return l.ctx.Err()
		}, func(s *server) (result, error) { return run(s, dur) })
		if err != nil {
			return out, err
		}
		out = append(out, c)
	}
	return out, nil
}

// tfbPipelineLua sends wrk's request `depth` times per round trip (the script's argument), as
// TechEmpower's plaintext test does.
const tfbPipelineLua = `init = function(args)
  local depth = tonumber(args[1]) or 1
  local r = {}
  for i = 1, depth do r[i] = wrk.format() end
  req = table.concat(r)
end
request = function() return req end
`

func runWrkScript(ctx context.Context, url string, conns int, d time.Duration, script string, args ...string) (result, error) {
	threads := min(wrkThreads, conns)
	a := []string{"-t" + strconv.Itoa(threads), "-c" + strconv.Itoa(conns), "-d" + strconv.Itoa(int(d.Seconds())) + "s",
		"--timeout", "60s", "--latency", "-s", script, url}
	if len(args) > 0 {
		a = append(append(a, "--"), args...)
	}
	out, err := command(ctx, "wrk", a...)
	if ctx.Err() != nil {
		return result{}, ctx.Err()
	}
	if err != nil {
		return result{}, fmt.Errorf("wrk: %w\n%s", err, out)
	}
	return parseWrk(out)
}

// tfbFortunes is TechEmpower's Fortune table, as examples/techempower/setup.php fills it.
var tfbFortunes = map[int]string{
	1:  "fortune: No such file or directory",
	2:  "A computer scientist is someone who fixes things that aren't broken.",
	3:  "After enough decimal places, nobody gives a damn.",
	4:  "A bad random number generator: 1, 1, 1, 1, 1, 4.33e+67, 1, 1, 1",
	5:  "A computer program does what you tell it to do, not what you want it to do.",
	6:  "Emacs is a nice operating system, but I prefer UNIX. — Tom Christaensen",
	7:  "Any program that runs right is obsolete.",
	8:  "A list is only as strong as its weakest link. — Donald Knuth",
	9:  "Feature: A bug with seniority.",
	10: "Computers make very fast, very accurate mistakes.",
	11: `<script>alert("This should not be displayed in a browser alert box.");</script>`,
	12: "フレームワークのベンチマーク",
}

// tfbAnswer is one answer, with the headers TechEmpower requires checked.
func (l *lab) tfbGet(base, path, wantType string) ([]byte, error) {
	resp, err := l.client(30 * time.Second).Get(base + path)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", path, err)
	}
	if resp.StatusCode != 200 {
		return nil, fmt.Errorf("GET %s: status %d: %.300s", path, resp.StatusCode, body)
	}
	for _, h := range []string{"Server", "Date", "Content-Type", "Content-Length"} {
		if resp.Header.Get(h) == "" {
			return nil, fmt.Errorf("GET %s: no %s header (TechEmpower requires it); headers %v", path, h, resp.Header)
		}
	}
	if _, err := http.ParseTime(resp.Header.Get("Date")); err != nil {
		return nil, fmt.Errorf("GET %s: Date %q: %w", path, resp.Header.Get("Date"), err)
	}
	// As TechEmpower's verifier: the type, with or without "; charset=utf-8" (fortunes ask for it).
	norm := func(s string) string { return strings.ToLower(strings.ReplaceAll(s, " ", "")) }
	if ct := norm(resp.Header.Get("Content-Type")); ct != norm(wantType) && ct != norm(wantType)+";charset=utf-8" {
		return nil, fmt.Errorf("GET %s: Content-Type %q, want %q", path, resp.Header.Get("Content-Type"), wantType)
	}
	if n, err := strconv.Atoi(resp.Header.Get("Content-Length")); err != nil || n != len(body) {
		return nil, fmt.Errorf("GET %s: Content-Length %q for %d bytes", path, resp.Header.Get("Content-Length"), len(body))
	}
	return body, nil
}

type tfbWorld struct {
	ID           int `json:"id"`
	RandomNumber int `json:"randomNumber"`
}

// tfbWorld decodes one World object, exactly the keys id and randomNumber, both in 1..10000.
func decodeWorld(raw json.RawMessage) (tfbWorld, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return tfbWorld{}, fmt.Errorf("not an object: %s", raw)
	}
	if len(m) != 2 || m["id"] == nil || m["randomNumber"] == nil {
		return tfbWorld{}, fmt.Errorf("want exactly id and randomNumber: %s", raw)
	}
	var w tfbWorld
	if err := json.Unmarshal(raw, &w); err != nil {
		return tfbWorld{}, fmt.Errorf("%s: %w", raw, err)
	}
	if w.ID < 1 || w.ID > 10000 || w.RandomNumber < 1 || w.RandomNumber > 10000 {
		return tfbWorld{}, fmt.Errorf("out of 1..10000: %s", raw)
	}
	return w, nil
}

// worldsInDB reads the rows of ids from the database.
func (d tfbDB) worldsInDB(ids []int) (map[int]int, error) {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = strconv.Itoa(id)
	}
	out, err := d.sql(true, "SELECT id, randomNumber FROM World WHERE id IN ("+strings.Join(s, ",")+")")
	if err != nil {
		return nil, err
	}
	rows := map[int]int{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Split(line, "\t")
		if len(f) != 2 {
			return nil, fmt.Errorf("unexpected row %q", line)
		}
		id, _ := strconv.Atoi(f[0])
		rn, _ := strconv.Atoi(f[1])
		rows[id] = rn
	}
	return rows, nil
}

// verifyTFB checks every test type's answers of s, as TechEmpower's verifier does, before any load.
func (l *lab) verifyTFB(s *server, d tfbDB) error {
	base := strings.TrimSuffix(s.url, "/plaintext")
	body, err := l.tfbGet(base, "/plaintext", "text/plain")
	if err != nil {
		return err
	}
	if string(body) != "Hello, World!" {
		return fmt.Errorf("/plaintext: %q", body)
	}
	if body, err = l.tfbGet(base, "/json", "application/json"); err != nil {
		return err
	}
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil || len(m) != 1 || m["message"] != "Hello, World!" {
		return fmt.Errorf("/json: %s", body)
	}
	// The worlds of one answer: their count, shape, and (unless the load could change them) the
	// database's values.
	worlds := func(path string, want int, array bool) ([]tfbWorld, error) {
		body, err := l.tfbGet(base, path, "application/json")
		if err != nil {
			return nil, err
		}
		var raws []json.RawMessage
		if array {
			if err := json.Unmarshal(body, &raws); err != nil {
				return nil, fmt.Errorf("%s: not a JSON array: %.200s", path, body)
			}
		} else {
			raws = []json.RawMessage{body}
		}
		if len(raws) != want {
			return nil, fmt.Errorf("%s: %d objects, want %d", path, len(raws), want)
		}
		out := make([]tfbWorld, len(raws))
		ids := make([]int, len(raws))
		for i, r := range raws {
			if out[i], err = decodeWorld(r); err != nil {
				return nil, fmt.Errorf("%s: %w", path, err)
			}
			ids[i] = out[i].ID
		}
		db, err := d.worldsInDB(ids)
		if err != nil {
			return nil, err
		}
		for _, w := range out {
			if db[w.ID] != w.RandomNumber {
				return nil, fmt.Errorf("%s: answered id %d randomNumber %d, the database has %d", path, w.ID, w.RandomNumber, db[w.ID])
			}
		}
		return out, nil
	}
	for i := 0; i < 5; i++ {
		if _, err := worlds("/db", 1, false); err != nil {
			return err
		}
	}
	counts := []struct {
		q    string
		want int
	}{{"", 1}, {"?queries=", 1}, {"?queries=foo", 1}, {"?queries=0", 1}, {"?queries=-5", 1}, {"?queries=1", 1},
		{"?queries=20", 20}, {"?queries=500", 500}, {"?queries=501", 500}, {"?queries=100000", 500}}
	for _, c := range counts {
		if _, err := worlds("/queries"+c.q, c.want, true); err != nil {
			return err
		}
	}
	// Updates: each answered row must be in the database with the answered number, and differ
	// from what the row held just before (read through /queries is not possible for given ids,
	// so from the database).
	for _, c := range counts {
		if _, err := worlds("/updates"+c.q, c.want, true); err != nil {
			return err
		}
	}
	for i := 0; i < 3; i++ {
		before, err := d.worldsInDB(seq(1, 10000))
		if err != nil {
			return err
		}
		got, err := worlds("/updates?queries=20", 20, true)
		if err != nil {
			return err
		}
		changed := 0
		for _, w := range got {
			if before[w.ID] != w.RandomNumber {
				changed++
			}
		}
		if changed == 0 {
			return errors.New("/updates?queries=20: no row's randomNumber changed")
		}
	}
	body, err = l.tfbGet(base, "/fortunes", "text/html; charset=utf-8")
	if err != nil {
		return err
	}
	return checkFortunes(body)
}

func seq(from, to int) []int {
	out := make([]int, 0, to-from+1)
	for i := from; i <= to; i++ {
		out = append(out, i)
	}
	return out
}

var tfbRow = regexp.MustCompile(`<tr><td>(\d+)</td><td>(.*?)</td></tr>`)

// checkFortunes checks the fortunes page: TechEmpower's markup, every fortune plus the one added
// at request time, sorted by message, and HTML-escaped.
func checkFortunes(body []byte) error {
	page := strings.Join(strings.Fields(string(body)), " ")
	page = strings.ReplaceAll(page, "> <", "><")
	head := "<!DOCTYPE html><html><head><title>Fortunes</title></head><body><table><tr><th>id</th><th>message</th></tr>"
	if !strings.HasPrefix(strings.ToLower(page), strings.ToLower(head)) || !strings.HasSuffix(page, "</table></body></html>") {
		return fmt.Errorf("/fortunes: not TechEmpower's markup: %.300s", body)
	}
	if strings.Contains(string(body), "<script") {
		return errors.New("/fortunes: a message is not HTML-escaped (<script> in the page)")
	}
	want := map[int]string{0: "Additional fortune added at request time."}
	for id, m := range tfbFortunes {
		want[id] = m
	}
	type row struct {
		id  int
		msg string
	}
	var exp []row
	for id, m := range want {
		exp = append(exp, row{id, m})
	}
	sort.Slice(exp, func(i, j int) bool { return exp[i].msg < exp[j].msg })
	rows := tfbRow.FindAllStringSubmatch(string(body), -1)
	if len(rows) != len(exp) {
		return fmt.Errorf("/fortunes: %d rows, want %d", len(rows), len(exp))
	}
	for i, r := range rows {
		id, _ := strconv.Atoi(r[1])
		if id != exp[i].id || html.UnescapeString(r[2]) != exp[i].msg {
			return fmt.Errorf("/fortunes: row %d is %s %q, want %d %q (sorted by message)", i+1, r[1], r[2], exp[i].id, exp[i].msg)
		}
	}
	return nil
}

// techempowerMarkdown writes the scenario's section.
func techempowerMarkdown(b *strings.Builder, cs []*comparison) {
	if len(cs) == 0 {
		return
	}
	b.WriteString("## TechEmpower test types (issue 16)\n\n")
	fmt.Fprintf(b, "examples/techempower: TechEmpower Framework Benchmarks' test types on Peregrine in worker mode (raw, one PDO "+
		"connection per worker) and on nginx + PHP-FPM (the same code, a persistent PDO connection per child), %d workers, "+
		"against the local MariaDB and PostgreSQL (databases of the benchmark's own: World of 10,000 rows, Fortune). Every "+
		"answer of both servers was verified before the load (headers, shapes, query counts clamped to 1..500, escaping, "+
		"updates in the database). Plaintext is pipelined 16 deep, as TechEmpower runs it.\n\n", cs[0].workers)
	b.WriteString("| test type | load | system | req/s | p50 | p99 | server CPU / request | other load | failed / requests | Peregrine ÷ this |\n|---|---|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, c := range cs {
		for j, s := range c.systems {
			ratio := "–"
			if j > 0 {
				ratio = fmt.Sprintf("%.2f× (CPU %s)", c.ratio(0, j), fmtCPURatio(c.cpuRatio(0, j)))
			}
			fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", c.app, c.load, s, fmtRPS(c.medianRPS(j)),
				fmtDur(c.medianDur(j, func(r result) time.Duration { return r.p50 })),
				fmtDur(c.medianDur(j, func(r result) time.Duration { return r.p99 })),
				fmtDur(c.medianDur(j, result.cpuPerRequest)), c.otherLoad(j), fmtFailed(c, j), ratio)
		}
	}
	b.WriteString("\n")
}
