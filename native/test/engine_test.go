package nativetest

import (
	"os"
	"strings"
	"testing"
)

// TestEngine: with PEREGRINE_PHP_ENGINE naming a PHP executable (by default in classic mode:
// PHP-FPM's, when it is installed), the runtime runs its requests
// inside that executable's engine (the process image is the engine's, not bin/peregrine-php),
// in both modes, and neither PHP nor the programs it runs see the preload that put it there.
// TestCases runs every FPM behaviour there too. An engine that cannot be executed leaves the
// runtime on libphp; an executable that is not PHP fails the start, loudly.
func TestEngine(t *testing.T) {
	ms := engineModes(t)
	if len(ms) == 0 {
		t.Skip(phpEngine + " is missing")
	}
	for _, m := range ms {
		t.Run(m.name, func(t *testing.T) {
			p := m.start(t)
			for range 2 { // the second request runs in the same engine as the first
				v := decode(t, p.do(t, caseRequest("engine", request{})))
				if v["exe"] != phpEngine {
					t.Errorf("PHP runs in %v, want %s", v["exe"], phpEngine)
				}
				if v["preload"] != false || v["child"] != "end" {
					t.Errorf("LD_PRELOAD seen by PHP: %v, by a program PHP ran: %q; want neither", v["preload"], v["child"])
				}
			}
			v := decode(t, p.do(t, caseRequest("sapi", request{})))
			if v["sapi"] != "fpm-fcgi" || v["opcache"] != true {
				t.Errorf("PHP_SAPI %v, OPcache enabled %v; want fpm-fcgi and true", v["sapi"], v["opcache"])
			}
		})
	}
	// Classic mode runs on PHP-FPM's engine by itself; worker mode stays on libphp (pcntl, the
	// embed php.ini), and an empty PEREGRINE_PHP_ENGINE keeps classic mode there too.
	for _, tt := range []struct {
		name string
		m    mode
		env  []string
		want string
	}{
		{"classic-default", modes[0], nil, phpEngine},
		{"worker-default", modes[1], nil, runtime},
		{"classic-off", modes[0], []string{"PEREGRINE_PHP_ENGINE="}, runtime},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("PEREGRINE_PHP_ENGINE", "") // restored after the test; unset during it
			os.Unsetenv("PEREGRINE_PHP_ENGINE")
			p := startReady(t, startEnv(t, tt.env, tt.m.argv()...))
			if v := decode(t, p.do(t, caseRequest("engine", request{}))); v["exe"] != tt.want {
				t.Errorf("PHP runs in %v, want %s", v["exe"], tt.want)
			}
		})
	}
	// Without the conf.d that loads OPcache, the runtime starts itself again with it: in the
	// engine again, not in the executable's own main().
	t.Run("opcache-reexec", func(t *testing.T) {
		p := startReady(t, startEnv(t, []string{"PEREGRINE_PHP_ENGINE=" + phpEngine, "PHP_INI_SCAN_DIR="}, runtime))
		v := decode(t, p.do(t, caseRequest("engine", request{})))
		if v["exe"] != phpEngine {
			t.Errorf("PHP runs in %v, want %s", v["exe"], phpEngine)
		}
		if v := decode(t, p.do(t, caseRequest("sapi", request{}))); v["opcache"] != true {
			t.Errorf("OPcache enabled %v, want true", v["opcache"])
		}
	})
	t.Run("missing", func(t *testing.T) {
		p := startReady(t, startEnv(t, []string{"PEREGRINE_PHP_ENGINE=/nonexistent/php-fpm"}, runtime))
		v := decode(t, p.do(t, caseRequest("engine", request{})))
		if v["exe"] != runtime {
			t.Errorf("PHP runs in %v, want %s (libphp)", v["exe"], runtime)
		}
		if !strings.Contains(p.log.String(), "running PHP from libphp") {
			t.Errorf("nothing logged about the engine that could not run:\n%s", p.log)
		}
	})
	t.Run("not-php", func(t *testing.T) {
		p := startEnv(t, []string{"PEREGRINE_PHP_ENGINE=/bin/true"}, runtime)
		p.in.Close() // a runtime that started anyway reads no request and ends
		if code := p.waitExit(t); code == 0 {
			t.Errorf("exit status 0 in /bin/true, want a failure:\n%s", p.log)
		}
	})
}
