package nativetest

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var updateServerAll = flag.Bool("update", false, "rewrite testdata/serverall.golden.json")

// serverAllRequest has many headers (a browser's, repeated names, names nginx drops, values
// to filter) and server parameters whose names PHP mangles or makes numeric or nested, so
// that every way $_SERVER is built gets a variable.
func serverAllRequest() request {
	return caseRequest("serverall", request{Method: "POST", URI: "/serverall.php/more?q=1&r=%3C", Scheme: "https",
		Params: []field{{"PATH_INFO", "/more"}, {"HTTPS", "on"}, {"odd.name", "dot"}, {" lead", "space"},
			{"in side", "space"}, {"arr[x]", "nested"}, {"42", "numeric"}, {"-7", "negative"}, {"lower_case", "x"},
			{"REMOTE_ADDR", "10.0.0.9"}, {"EMPTY", ""}, {"ONE", "1"}, {"__Host-x", "kept"}},
		Headers: []field{{"host", "example.test"},
			{"user-agent", "Mozilla/5.0 (X11; Linux x86_64; rv:120.0) Gecko/20100101 Firefox/120.0"},
			{"accept", "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"},
			{"accept-language", "en-US,en;q=0.5"}, {"accept-encoding", "gzip, deflate, br"},
			{"x-multi", "a"}, {"cookie", "k=v"}, {"connection", "keep-alive"}, {"x-multi", "b"},
			{"cookie", "l=w"}, {"upgrade-insecure-requests", "1"}, {"sec-fetch-dest", "document"},
			{"x-angle", "<b>\"quoted\" & 'single'</b> é"}, {"x-empty", ""}, {"proxy", "http://evil"},
			{"x.dot", "dropped"}, {"x_under", "dropped"}, {"123", "digits"},
			{"authorization", "Basic dXNlcjpwdw=="}, {"content-type", "text/plain"}, {"content-length", "4"}},
		Body: []byte("body")})
}

// TestServerAll compares the whole $_SERVER, its keys in order, and what filter_input() reads
// for INPUT_SERVER, with testdata/serverall.golden.json: what the runtime registered when every
// variable went through sapi_module.input_filter and php_register_variable_safe(), as FPM's
// does. With filter.default set the filter must still apply to $_SERVER (and not to
// filter_input()'s raw copies). -update rewrites the file.
func TestServerAll(t *testing.T) {
	golden := filepath.Join(filepath.Dir(cases), "serverall.golden.json")
	got := map[string]json.RawMessage{}
	for _, m := range append(modes, engineModes(t)...) {
		for _, filter := range []string{"unsafe_raw", "special_chars"} {
			t.Run(m.name+"/"+filter, func(t *testing.T) {
				var ini []string
				if filter != "unsafe_raw" {
					ini = append(ini, "filter.default="+filter)
				}
				p := m.start(t, ini...)
				var first []byte
				for i := range 3 { // the same each time: nothing of one request stays in the next
					body := requestServerAll(t, p)
					if i == 0 {
						first = body
					} else if !bytes.Equal(body, first) {
						t.Fatalf("request %d differs from the first:\n%s\n%s", i, body, first)
					}
				}
				got[filter] = first
				if *updateServerAll {
					return
				}
				var want map[string]json.RawMessage
				b, err := os.ReadFile(golden)
				if err != nil {
					t.Fatal(err)
				}
				if err := json.Unmarshal(b, &want); err != nil {
					t.Fatal(err)
				}
				if !jsonEqual(t, want[filter], first) {
					t.Errorf("$_SERVER and filter_input(INPUT_SERVER) differ from %s[%q]:\n got %s\nwant %s", golden, filter, first, want[filter])
				}
			})
		}
	}
	if *updateServerAll {
		b, err := json.MarshalIndent(got, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(golden, append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// requestServerAll sends serverAllRequest and returns its answer with the process's environment
// (the variables before FCGI_ROLE, the first of the request's) taken out of $_SERVER and the
// cases directory written $CASES.
func requestServerAll(t *testing.T, p *proc) []byte {
	t.Helper()
	a := p.do(t, serverAllRequest())
	wantStatus(t, a, 200)
	var v map[string]any
	if err := json.Unmarshal([]byte(strings.ReplaceAll(a.Body, strings.ReplaceAll(cases, "/", `\/`), "$CASES")), &v); err != nil {
		t.Fatalf("body is not a JSON object: %v\n%q", err, a.Body)
	}
	server := v["server"].([]any)
	for i, kv := range server {
		if kv.([]any)[0] == "FCGI_ROLE" {
			v["server"] = server[i:]
			break
		}
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func jsonEqual(t *testing.T, a, b []byte) bool {
	t.Helper()
	var x, y bytes.Buffer
	if err := json.Compact(&x, a); err != nil {
		return false
	}
	if err := json.Compact(&y, b); err != nil {
		t.Fatal(err)
	}
	return bytes.Equal(x.Bytes(), y.Bytes())
}
