package nativetest

import "testing"

// Round trips of a hello-world request through the pipes, one at a time: the runtime's own
// cost per request, without HTTP (go test -bench . ./native/test).
func BenchmarkHello(b *testing.B) {
	for _, m := range modes {
		b.Run(m.name, func(b *testing.B) {
			p := start(b, m.argv()...)
			r := caseRequest("hello", request{})
			b.ResetTimer()
			for range b.N {
				if a := p.do(b, r); a.Body != "Hello, world!" {
					b.Fatalf("body %q", a.Body)
				}
			}
		})
	}
}
