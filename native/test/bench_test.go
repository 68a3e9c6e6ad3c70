package nativetest

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
)

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

// Requests of a concurrent worker (docs/concurrency.md) that each wait once, 256 in flight: the
// loop's cost per request, a new Fiber each included (go test -bench AsyncShortWaits ./native/test).
func BenchmarkAsyncShortWaits(b *testing.B) {
	const window = 256
	p := startAsync(b, window)
	var chunk []byte
	for i := range window {
		chunk = append(chunk, encodeRequest(uint32(i+1), request{URI: "/sleep?us=10"})...)
	}
	before := cpuTicks(b, p.cmd.Process.Pid)
	b.ResetTimer()
	done := 0
	for ; done < b.N; done += window {
		if err := <-p.write(chunk); err != nil {
			b.Fatal(err)
		}
		collect(b, p, window)
	}
	// The worker's own CPU (user + system) per request: wall time on a shared host says little.
	b.ReportMetric(float64(cpuTicks(b, p.cmd.Process.Pid)-before)*1e6/100/float64(done), "worker-µs/req")
}

// cpuTicks is the user + system time of process pid so far, in clock ticks (1/100 s on Linux).
func cpuTicks(b testing.TB, pid int) int {
	b.Helper()
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	// The fields after the command name, which ends with the last ")": utime and stime are the
	// 12th and 13th of them.
	fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	utime, _ := strconv.Atoi(fields[11])
	stime, _ := strconv.Atoi(fields[12])
	return utime + stime
}
