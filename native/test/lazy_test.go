package nativetest

import (
	"os/user"
	"path/filepath"
	"strconv"
	"testing"
)

// startLazy runs testdata/lazy_server.php, a worker whose own code never names $_SERVER, with
// extra -d settings.
func startLazy(t *testing.T, ini ...string) *proc {
	t.Helper()
	argv := []string{runtime}
	for _, kv := range ini {
		argv = append(argv, "-d", kv)
	}
	return start(t, append(argv, filepath.Join(filepath.Dir(cases), "lazy_server.php"))...)
}

// TestServerSuperglobalOnDemand: while no code that names $_SERVER was compiled, a request has
// no $_SERVER, as under PHP-FPM with auto_globals_jit, and the last request's is gone; the
// first file that names it gets this request's, and from then on every request has its own.
func TestServerSuperglobalOnDemand(t *testing.T) {
	p := startLazy(t)
	for _, step := range []struct{ uri, want string }{
		{"/one", "/one unregistered"},
		{"/two", "/two unregistered"},
		{"/include", "/include unregistered /include peregrine"},
		{"/four", "/four /four"},
		{"/five?x=1", "/five?x=1 /five?x=1"},
	} {
		wantBody(t, p.do(t, request{URI: step.uri}), step.want)
	}
}

// TestServerSuperglobalForFilterInput: filter_input(INPUT_SERVER) in a request without $_SERVER
// gets this request's value (PHP creates $_SERVER for it), and later requests have $_SERVER.
func TestServerSuperglobalForFilterInput(t *testing.T) {
	p := startLazy(t)
	wantBody(t, p.do(t, request{URI: "/a"}), "/a unregistered")
	wantBody(t, p.do(t, request{URI: "/filter"}), "/filter unregistered /filter")
	wantBody(t, p.do(t, request{URI: "/b"}), "/b /b")
}

// TestServerSuperglobalWithoutJit: auto_globals_jit off (or opcache.preload set: preloaded code
// is never compiled in the worker) registers $_SERVER for every request, as before.
func TestServerSuperglobalWithoutJit(t *testing.T) {
	u, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	preload := []string{"opcache.preload=" + filepath.Join(filepath.Dir(cases), "lazy_preload.php"), "opcache.preload_user=" + u.Username}
	for _, ini := range [][]string{{"auto_globals_jit=0"}, preload} {
		t.Run(ini[0], func(t *testing.T) {
			p := startLazy(t, ini...)
			wantBody(t, p.do(t, request{URI: "/one"}), "/one /one")
			wantBody(t, p.do(t, request{URI: "/two"}), "/two /two")
		})
	}
}

// TestLazyValgrind: requests without $_SERVER, the one that creates it on demand and those
// after it, then raw NativeServer requests (nativeServerMix: the Request built natively and
// in PHP, answered by peregrine_answer()), under memcheck.
func TestLazyValgrind(t *testing.T) {
	memoryTests(t)
	valgrind := memcheck(t, modes[1])
	valgrind = valgrind[:len(valgrind)-1] // without the worker-mode fixture
	for _, tc := range []struct {
		script string
		env    []string
		last   string
	}{{"lazy_server.php", nil, "/include"}, {"native_server.php", []string{"NATIVE_MODE=serve"}, "/throw"}} {
		t.Run(tc.script, func(t *testing.T) {
			argv := append(append([]string{}, valgrind...), filepath.Join(filepath.Dir(cases), tc.script))
			p := startEnv(t, append([]string{"USE_ZEND_ALLOC=0"}, tc.env...), argv...)
			if f := p.readFrame(t); f.Type != typeReady {
				t.Fatalf("first frame type %d, want READY", f.Type)
			}
			for i := range 200 {
				uri := "/r?i=" + strconv.Itoa(i)
				if i == 100 {
					uri = tc.last
				}
				r := request{URI: uri, Headers: []field{{"host", "localhost"}, {"cookie", "a=b"}}}
				if tc.script == "native_server.php" && i != 100 {
					r = nativeServerMix(t, i)
				}
				if a := p.do(t, r); a.Status == 0 {
					t.Fatalf("request %d: no status", i)
				}
			}
			<-p.write(appendFrame(nil, typeStop, 0, nil))
			if code := p.waitExit(t); code != 0 {
				t.Errorf("under valgrind: exit status %d, want 0 (99: memcheck found errors):\n%s", code, p.log)
			}
		})
	}
}
