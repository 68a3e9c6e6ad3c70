// Command bench compares Peregrine with nginx + PHP-FPM, `php -S` and a pure Go server on this
// machine, over loopback only, and writes bench/results/latest.md and latest.png.
//
// Run it from the repository root through `make bench` (which installs what it needs with
// bench/setup.sh and builds bin/peregrine first), or directly:
//
//	go run ./bench/cmd/bench [-quick] [-only hello,delay,framework,classic,front,memory] [-runs N]
//
// Every server it starts is a child process in its own process group, configured from files in
// a temporary directory, listening on a free 127.0.0.1 port; it stops them by pid at the end and
// on Ctrl-C. It never touches system services.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

func main() {
	var (
		quick     = flag.Bool("quick", false, "one short pass of each scenario (about 2.5 minutes)")
		only      = flag.String("only", "", "comma-separated scenarios to run: "+scenarioNames+" (default all)")
		runs      = flag.Int("runs", 0, "runs per cell (default 3, 1 with -quick)")
		peregrine = flag.String("peregrine", "bin/peregrine", "the peregrine binary")
		outDir    = flag.String("out", "bench/results", "where latest.md and latest.png (quick.md and quick.png with -quick) go")
		keep      = flag.Bool("keep", false, "keep the temporary directory (configs and server logs)")
		goHello   = flag.String("go-hello", "", "internal: serve the pure Go hello world on this address")
	)
	flag.Parse()
	if *goHello != "" {
		serveGoHello(*goHello)
		return
	}
	if err := run(*quick, *only, *runs, *peregrine, *outDir, *keep); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		if errors.Is(err, context.Canceled) {
			os.Exit(130)
		}
		os.Exit(1)
	}
}

// serveGoHello is the ceiling: the same response as the PHP apps, from net/http alone.
func serveGoHello(addr string) {
	h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write([]byte("Hello, world!"))
	})
	if err := http.ListenAndServe(addr, h); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(quick bool, only string, runs int, peregrine, outDir string, keep bool) error {
	root, err := os.Getwd()
	if err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(root, "bench", "apps")); err != nil {
		return fmt.Errorf("run me from the repository root (bench/apps not found in %s)", root)
	}
	if !filepath.IsAbs(peregrine) {
		peregrine = filepath.Join(root, peregrine)
	}
	if _, err := os.Stat(peregrine); err != nil {
		return fmt.Errorf("%s not found: run `make build` first", peregrine)
	}
	if err := checkTools(); err != nil {
		return err
	}
	raiseFileLimit()

	p := fullPlan()
	if quick {
		p = quickPlan()
	}
	if runs > 0 {
		p.runs = runs
	}
	want := map[string]bool{}
	for _, s := range strings.Split(only, ",") {
		if s = strings.TrimSpace(s); s != "" {
			if !validScenario(s) {
				return fmt.Errorf("-only: unknown scenario %q (%s)", s, scenarioNames)
			}
			want[s] = true
		}
	}
	selected := func(s string) bool { return len(want) == 0 || want[s] }

	tmp, err := os.MkdirTemp("", "peregrine-bench-")
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	lab := newLab(ctx, root, tmp, peregrine)
	lab.quietWait = p.quietWait
	defer func() {
		lab.stopAll()
		if keep {
			fmt.Fprintln(os.Stderr, "bench: kept", tmp)
		} else {
			_ = os.RemoveAll(tmp)
		}
	}()

	started := time.Now()
	rep := &report{plan: p, quick: quick, machine: describeMachine(peregrine), started: started}
	logf("machine: %s; %d runs per cell; results go to %s", rep.machine.summary(), p.runs, outDir)
	phase := time.Now()
	done := func(name string) {
		logf("%s done in %s", name, time.Since(phase).Round(time.Second))
		phase = time.Now()
	}
	if selected("hello") {
		if rep.hello, err = lab.helloScenario(p); err != nil {
			return err
		}
		done("hello")
	}
	if selected("delay") {
		if rep.delay, err = lab.delayScenario(p); err != nil {
			return err
		}
		done("delay")
	}
	if selected("framework") {
		if rep.framework, err = lab.frameworkScenario(p); err != nil {
			return err
		}
		done("framework")
	}
	if selected("classic") {
		if rep.classic, err = lab.classicScenario(p); err != nil {
			return err
		}
		mw, err := lab.mediawikiScenario(p) // mediawiki.go (issue 16)
		if err != nil {
			return err
		}
		if mw != nil {
			rep.classic = append(rep.classic, mw)
		}
		done("classic")
	}
	if selected("front") {
		if rep.front, err = lab.frontScenario(p); err != nil {
			return err
		}
		done("front")
	}
	if selected("memory") {
		if rep.memory, err = lab.memoryScenario(p); err != nil {
			return err
		}
		done("memory")
	}
	if selected("highloadcup") { // highloadcup.go (issue 18)
		if rep.highloadcup, err = lab.highloadcupScenario(p); err != nil {
			return err
		}
		done("highloadcup")
	}
	if selected("techempower") { // techempower.go (issue 16)
		if rep.techempower, err = lab.techempowerScenario(p); err != nil {
			return err
		}
		done("techempower")
	}
	if selected("concurrency") { // concurrency.go (issue 17)
		if rep.concurrency, err = lab.concurrencyScenario(p); err != nil {
			return err
		}
		done("concurrency")
	}
	if selected("jobs") { // jobsbench.go (issue 19)
		if rep.jobs, err = lab.jobsScenario(p); err != nil {
			return err
		}
		done("jobs")
	}
	if selected("websocket") { // websocket.go (issue 26)
		if rep.websocket, err = lab.websocketScenario(p); err != nil {
			return err
		}
		done("websocket")
	}
	rep.elapsed = time.Since(started)

	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return err
	}
	// A quick pass does not overwrite the results of the last full run.
	base := "latest"
	if quick {
		base = "quick"
	}
	mdPath, pngPath := filepath.Join(outDir, base+".md"), filepath.Join(outDir, base+".png")
	md := rep.markdown()
	fmt.Println(md)
	if err := os.WriteFile(mdPath, []byte(md), 0o644); err != nil {
		return err
	}
	if err := rep.chart(ctx, tmp, pngPath); err != nil {
		return fmt.Errorf("chart: %w", err)
	}
	logf("wrote %s and %s in %s", mdPath, pngPath, rep.elapsed.Round(time.Second))
	return nil
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench: "+format+"\n", args...)
}

// raiseFileLimit lifts the soft limit on open files to the hard one, for this process and the
// servers and load generators it starts (1000 connections need more than the usual 1024).
func raiseFileLimit() {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return
	}
	l.Cur = l.Max
	// Calling Setrlimit also stops os/exec from restoring the original limit in children.
	_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l)
}
