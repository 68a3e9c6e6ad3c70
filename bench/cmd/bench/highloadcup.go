package main

// The HighLoad Cup scenario (issue 18): examples/highloadcup at the contest's full size (1M
// users, 1M locations, 11M visits; the small size with -quick) in shared tables, 2 workers; the
// load time of the data, a mix of the contest's GET requests under wrk -t2 -c10, and the memory
// of the whole server (PSS of the daemon and workers, plus the part of the tables' segment no
// process has mapped) beside the tables' own figures.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// hlcResult is what the scenario measured.
type hlcResult struct {
	size        string // full or small
	load        time.Duration
	runs        []result
	tables      []hlcTable
	segmentKiB  int // the segment's allocated size
	processPSS  int // KiB: daemon and workers, their mappings of the segment included
	mappedPSS   int // KiB: the processes' share of the segment
	workers     int
	connections int
}

type hlcTable struct {
	Name     string `json:"name"`
	Rows     int64  `json:"rows"`
	Capacity int64  `json:"capacity"`
	Bytes    int64  `json:"bytes"`
}

// wholeKiB is the whole server: every process's PSS, plus what of the segment none maps.
func (h *hlcResult) wholeKiB() int { return h.processPSS + max(0, h.segmentKiB-h.mappedPSS) }

const hlcLua = `-- the contest's GET requests, one path a line of $HLC_PATHS, in turn
local paths = {}
for line in io.lines(os.getenv("HLC_PATHS")) do paths[#paths + 1] = line end
local i = 0
request = function()
  i = i % #paths + 1
  return wrk.format("GET", paths[i])
end
`

func (l *lab) highloadcupScenario(p plan) (*hlcResult, error) {
	h := &hlcResult{size: "full", workers: 2, connections: 10}
	dur := p.helloDur
	if dur < 3*time.Second {
		dur = 3 * time.Second
	}
	if p.runs == 1 && p.quietWait == 0 { // -quick
		h.size = "small"
	}
	ex := l.abs("examples/highloadcup")
	data := filepath.Join(l.tmp, "hlc-data")
	php := func(out string, args ...string) error {
		cmd := execIn(l.ctx, ex, "php", append([]string{"-d", "memory_limit=-1"}, args...)...)
		b, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("php %v: %w\n%s", args, err, b)
		}
		if out != "" {
			return os.WriteFile(out, b, 0o644)
		}
		return nil
	}
	logf("highloadcup: generating the %s data", h.size)
	if err := php("", "generate.php", data, h.size); err != nil {
		return nil, err
	}
	defer os.RemoveAll(data)
	queries := filepath.Join(l.tmp, "hlc-queries.jsonl")
	if err := php(queries, "queries.php", data, "20000", "gets-only"); err != nil {
		return nil, err
	}
	var paths strings.Builder
	lines, err := os.ReadFile(queries)
	if err != nil {
		return nil, err
	}
	for _, line := range strings.Split(strings.TrimSpace(string(lines)), "\n") {
		var q struct{ Path string }
		if err := json.Unmarshal([]byte(line), &q); err != nil {
			return nil, err
		}
		paths.WriteString(q.Path + "\n")
	}
	pathsFile, luaFile := filepath.Join(l.tmp, "hlc-paths.txt"), filepath.Join(l.tmp, "hlc.lua")
	if err := os.WriteFile(pathsFile, []byte(paths.String()), 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(luaFile, []byte(hlcLua), 0o644); err != nil {
		return nil, err
	}

	port, err := freePort()
	if err != nil {
		return nil, err
	}
	adminPort, err := freePort()
	if err != nil {
		return nil, err
	}
	conf, err := os.ReadFile(filepath.Join(ex, "peregrine.yaml"))
	if err != nil {
		return nil, err
	}
	c := strings.NewReplacer("127.0.0.1:8080", "127.0.0.1:"+strconv.Itoa(port), "127.0.0.1:9180", "127.0.0.1:"+strconv.Itoa(adminPort),
		"php server.php", "php "+filepath.Join(ex, "server.php"), "php load.php", "php "+filepath.Join(ex, "load.php")).Replace(string(conf))
	c = strings.Replace(c, "workers:\n", fmt.Sprintf("workers:\n  dir: %q\n", ex), 1) + "log:\n  level: warn\n"
	confPath := filepath.Join(l.tmp, "hlc.yaml")
	if err := os.WriteFile(confPath, []byte(c), 0o644); err != nil {
		return nil, err
	}
	start := time.Now()
	daemonProc, err := l.start("peregrine", l.name("peregrine-hlc"), []string{"HLC_DATA=" + data}, syscall.SIGTERM, l.peregrine, "serve", "-c", confPath)
	if err != nil {
		return nil, err
	}
	s := &server{name: "peregrine (shared tables)", url: fmt.Sprintf("http://127.0.0.1:%d/users/1", port), procs: []*proc{daemonProc}}
	defer l.stopServer(s)
	for client := l.client(2 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if daemonProc.exited() {
			return nil, fmt.Errorf("the HighLoad Cup server exited during start-up (%v):\n%s", daemonProc.err, tail(daemonProc.log))
		}
		if time.Since(start) > 10*time.Minute {
			return nil, fmt.Errorf("the HighLoad Cup server was not ready after 10 minutes:\n%s", tail(daemonProc.log))
		}
		if err := l.ctx.Err(); err != nil {
			return nil, err
		}
		if resp, err := client.Get(s.url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
	}
	h.load = time.Since(start)
	logf("highloadcup: %s data loaded in %s", h.size, h.load.Round(100*time.Millisecond))

	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	wrk := func(d time.Duration) (string, error) {
		cmd := execIn(l.ctx, l.root, "wrk", "-t2", "-c"+strconv.Itoa(h.connections), "-d"+strconv.Itoa(int(d.Seconds()))+"s",
			"--timeout", "60s", "--latency", "-s", luaFile, base)
		cmd.Env = append(os.Environ(), "HLC_PATHS="+pathsFile)
		out, err := cmd.CombinedOutput()
		if l.ctx.Err() != nil {
			return "", l.ctx.Err()
		}
		if err != nil {
			return "", fmt.Errorf("wrk: %w\n%s", err, out)
		}
		return string(out), nil
	}
	if _, err := wrk(time.Second); err != nil { // warm-up
		return nil, err
	}
	for run := 0; run < p.runs; run++ {
		if l.quietWait > 0 {
			l.waitQuiet(l.quietWait)
		}
		out, err := wrk(dur)
		if err != nil {
			return nil, err
		}
		r, err := parseWrk(out)
		if err != nil {
			return nil, err
		}
		h.runs = append(h.runs, r)
	}

	resp, err := l.client(10 * time.Second).Get(fmt.Sprintf("http://127.0.0.1:%d/tables", adminPort))
	if err != nil {
		return nil, err
	}
	err = json.NewDecoder(resp.Body).Decode(&h.tables)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /tables: %d %v", resp.StatusCode, err)
	}
	daemon := daemonProc.pid()
	segment := "/dev/shm/peregrine-tables-" + strconv.Itoa(daemon)
	var st syscall.Stat_t
	if err := syscall.Stat(segment, &st); err != nil {
		return nil, fmt.Errorf("the tables' segment: %w", err)
	}
	h.segmentKiB = int(st.Blocks * 512 / 1024)
	for _, pid := range append([]int{daemon}, descendants(daemon, allStats())...) {
		_, pss := memKiB(pid)
		h.processPSS += pss
		h.mappedPSS += mappingPSS(pid, segment)
	}
	return h, nil
}

// execIn is a command run in dir.
func execIn(ctx context.Context, dir, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	return cmd
}

// mappingPSS is pid's PSS of the mapping of file, in KiB.
func mappingPSS(pid int, file string) int {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/smaps")
	if err != nil {
		return 0
	}
	total, in := 0, false
	for _, line := range strings.Split(string(data), "\n") {
		fields := strings.Fields(line)
		if len(fields) >= 5 && strings.Contains(fields[0], "-") { // a mapping's header line
			in = fields[len(fields)-1] == file
			continue
		}
		if in && len(fields) == 3 && fields[0] == "Pss:" {
			n, _ := strconv.Atoi(fields[1])
			total += n
		}
	}
	return total
}

// markdown writes the scenario's section.
func (h *hlcResult) markdown() string {
	if h == nil {
		return ""
	}
	var b strings.Builder
	b.WriteString("## HighLoad Cup 2017 on shared tables\n\n")
	fmt.Fprintf(&b, "examples/highloadcup at the %s size, %d workers: the data loaded by `tables.init` from the contest's JSON, "+
		"then a mix of 20,000 of the contest's GET requests (entities, /users/{id}/visits and /locations/{id}/avg with random filters, "+
		"some 404 and 400) under `wrk -t2 -c%d`. Memory: PSS of the daemon and workers, their mappings of the tables included, "+
		"plus the part of the tables' segment none has mapped.\n\n", h.size, h.workers, h.connections)
	rps, p50, p99 := make([]float64, len(h.runs)), make([]float64, len(h.runs)), make([]float64, len(h.runs))
	fails := 0
	for i, r := range h.runs {
		rps[i], p50[i], p99[i] = r.rps, float64(r.p50), float64(r.p99)
		fails += r.sockErr + r.readErr
	}
	b.WriteString("| data load | req/s | p50 | p99 | socket errors | whole server (PSS) | tables (segment) | visits table |\n|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	var visits int64
	for _, t := range h.tables {
		if t.Name == "visits" {
			visits = t.Bytes
		}
	}
	fmt.Fprintf(&b, "| %s | %s | %s | %s | %d | %.0f MiB | %.0f MiB | %.0f MiB (%.0f MB) |\n\n", h.load.Round(100*time.Millisecond),
		fmtRPS(median(rps)), fmtDur(time.Duration(median(p50))), fmtDur(time.Duration(median(p99))), fails,
		mib(h.wholeKiB()), mib(h.segmentKiB), float64(visits)/(1<<20), float64(visits)/1e6)
	b.WriteString("| table | rows | capacity | bytes |\n|---|---:|---:|---:|\n")
	for _, t := range h.tables {
		fmt.Fprintf(&b, "| %s | %d | %d | %d |\n", t.Name, t.Rows, t.Capacity, t.Bytes)
	}
	b.WriteString("\n")
	return b.String()
}
