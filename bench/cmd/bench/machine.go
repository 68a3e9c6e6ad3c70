package main

import (
	"bufio"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strconv"
	"strings"
)

// machine is what the report says about where it ran.
type machine struct {
	cores    int
	cpu      string
	kernel   string
	memory   string
	loadavg  string // at the start, to show what else was running
	versions [][2]string
}

func describeMachine(peregrine string) machine {
	m := machine{cores: runtime.NumCPU(), cpu: cpuModel(), kernel: firstOutputLine("uname", "-r")}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		f := strings.Fields(string(b))
		if len(f) >= 3 {
			m.loadavg = strings.Join(f[:3], " ")
		}
	}
	if kb := statusLine("/proc/meminfo", "MemTotal:"); kb > 0 {
		m.memory = strconv.FormatFloat(float64(kb)/1024/1024, 'f', 1, 64) + " GiB"
	}
	m.versions = [][2]string{
		{"Peregrine", firstOutputLine(peregrine, "version")},
		{"Peregrine source (git)", firstOutputLine("git", "describe", "--always", "--dirty")},
		{"Go", strings.TrimPrefix(firstOutputLine("go", "version"), "go version ")},
		{"PHP (CLI)", firstOutputLine("php", "-v")},
		{"PHP-FPM", firstOutputLine("php-fpm8.2", "-v")},
		{"nginx", strings.TrimPrefix(firstOutputLine("nginx", "-v"), "nginx version: ")},
		{"wrk", wrkVersion()},
		{"ab", strings.TrimPrefix(firstOutputLine("ab", "-V"), "This is ")},
		{"h2load", firstOutputLine("h2load", "--version")},
		{"OpenSSL", firstOutputLine("openssl", "version")},
		{"gnuplot", firstOutputLine("gnuplot", "--version")},
		{"Slim (php-slim)", debVersion("php-slim")},
		{"Laravel (php-laravel-framework)", debVersion("php-laravel-framework")},
		{"Nyholm PSR-7 (php-nyholm-psr7)", debVersion("php-nyholm-psr7")},
		{"Symfony (php-symfony-framework-bundle)", debVersion("php-symfony-framework-bundle")},
	}
	return m
}

func (m machine) summary() string {
	return strconv.Itoa(m.cores) + " cores, " + m.cpu
}

func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "unknown CPU"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown CPU"
}

func statusLine(path, key string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, key) {
			f := strings.Fields(l[len(key):])
			if len(f) > 0 {
				n, _ := strconv.Atoi(f[0])
				return n
			}
		}
	}
	return 0
}

// firstOutputLine runs a command and returns the first non-empty line it printed (stdout or
// stderr: nginx -v writes to stderr).
func firstOutputLine(name string, args ...string) string {
	out, _ := exec.Command(name, args...).CombinedOutput()
	for _, l := range strings.Split(string(out), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			return l
		}
	}
	return "?"
}

func wrkVersion() string {
	l := firstOutputLine("wrk", "-v")
	if m := regexp.MustCompile(`wrk (\S+)`).FindStringSubmatch(l); m != nil {
		return m[1]
	}
	return l
}

// debVersion is the upstream version of an installed Debian package ("3.12.4" of "3.12.4-1").
func debVersion(pkg string) string {
	out, err := exec.Command("dpkg-query", "-W", "-f=${Version}", pkg).Output()
	if err != nil || len(out) == 0 {
		return "?"
	}
	v := string(out)
	if i := strings.IndexByte(v, ':'); i >= 0 {
		v = v[i+1:]
	}
	if i := strings.LastIndexByte(v, '-'); i >= 0 {
		v = v[:i]
	}
	if i := strings.Index(v, "+"); i >= 0 {
		v = v[:i]
	}
	return v
}
