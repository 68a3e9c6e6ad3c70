package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// The MediaWiki main page (issue 16), a row of the classic scenario: Debian's `mediawiki`
// package (1.39), installed by bench/apps/mediawiki/install.sh into the benchmark's temporary
// directory with an SQLite database (maintenance/install.php, the installer's defaults: the
// Vector skin, CACHE_ACCEL through APCu), served from the same directory by Peregrine's classic
// mode and by nginx + PHP-FPM. Removing the temporary directory removes the wiki.

const mediawikiSource = "/usr/share/mediawiki"

// mediawikiMissing says why the MediaWiki row cannot run here, or "" when it can.
func mediawikiMissing() string {
	if _, err := os.Stat(mediawikiSource + "/maintenance/install.php"); err != nil {
		return "MediaWiki is not installed (apt-get install mediawiki; bench/setup.sh installs it)"
	}
	mods, _ := exec.Command("php", "-m").Output()
	if !strings.Contains("\n"+string(mods)+"\n", "\npdo_sqlite\n") {
		return "PHP's pdo_sqlite is missing (apt-get install php8.2-sqlite3)"
	}
	return ""
}

// mediawikiScenario measures the main page in classic mode against nginx + PHP-FPM; nil when
// MediaWiki cannot run here (the reason on stderr).
func (l *lab) mediawikiScenario(p plan) (*comparison, error) {
	if why := mediawikiMissing(); why != "" {
		logf("classic: MediaWiki main page skipped: %s", why)
		return nil, nil
	}
	dir := filepath.Join(l.tmp, "mediawiki")
	cmd := execIn(l.ctx, l.root, "bash", "bench/apps/mediawiki/install.sh", dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("installing MediaWiki: %w\n%s", err, out)
	}
	w := p.classicWorkers
	conns := 2 * w // as for WordPress: every worker busy, one request waiting
	load := fmt.Sprintf("wrk -t%d -c%d -d%s (keep-alive)", wrkThreads, conns, p.classicDur)
	const path = "/index.php?title=Main_Page"
	app := "MediaWiki " + debVersion("mediawiki") + " main page"
	logf("classic: %s, %d workers, %s", app, w, load)
	servers, err := l.startAll(
		func() (*server, error) {
			return l.startPeregrineWith(sysClassic, peregrineOptions{root: dir, workers: w, phpIni: classicIni, path: path})
		},
		func() (*server, error) {
			return l.startFPM(sysFPM, fpmOptions{docroot: dir, workers: w, backlog: fpmBacklog, tryFiles: true, path: path})
		},
	)
	if err != nil {
		return nil, err
	}
	defer l.stopAllServers(servers)
	for _, s := range servers { // the installer's main page, not an error page or a redirect
		body, err := l.getBody(s.url)
		if err != nil {
			return nil, fmt.Errorf("%s, MediaWiki: %w", s.name, err)
		}
		if !strings.Contains(body, "MediaWiki has been installed") {
			return nil, fmt.Errorf("%s, MediaWiki: not the main page: %.300s", s.name, body)
		}
	}
	c := newComparison(p.runs, w, conns, load)
	c.app = app
	err = l.compare(c, servers, func(s *server) error {
		if _, err := runWrk(l.ctx, s.url, conns, p.warmup); err != nil {
			return err
		}
		l.drain(s, time.Second)
		return l.ctx.Err()
	}, func(s *server) (result, error) {
		return runWrk(l.ctx, s.url, conns, p.classicDur)
	})
	return c, err
}

// getBody is the body of a 200 answer to GET url.
func (l *lab) getBody(url string) (string, error) {
	resp, err := l.client(30 * time.Second).Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != 200 {
		return "", fmt.Errorf("GET %s: status %d: %.300s", url, resp.StatusCode, b)
	}
	return string(b), nil
}
