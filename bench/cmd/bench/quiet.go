package main

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The machine may be busy with other work (a build, a test suite) that takes CPU from the server
// and the load generator. The benchmark waits a little for a quiet machine before each run, and
// records how much CPU everything else used during it.

// busyTime is the CPU time all cores have spent running processes (user, nice, system) or
// taken by the hypervisor (steal) since boot. Interrupt time is left out: the loopback traffic of
// the benchmark itself is handled there, and no process is charged for it.
func busyTime() time.Duration {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line) // cpu user nice system idle iowait irq softirq steal ...
	total := 0
	for i, s := range f[1:] {
		if i != 0 && i != 1 && i != 2 && i != 7 { // user, nice, system, steal (guest time is in user)
			continue
		}
		n, _ := strconv.Atoi(s)
		total += n
	}
	return time.Duration(total) * clockTick
}

// ownTime is the CPU time of this process and of its children that have exited (the load
// generators: wrk and ab run to completion within a run).
func ownTime() time.Duration {
	var total time.Duration
	for _, who := range []int{syscall.RUSAGE_SELF, syscall.RUSAGE_CHILDREN} {
		var ru syscall.Rusage
		if syscall.Getrusage(who, &ru) == nil {
			total += time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		}
	}
	return total
}

// waitQuiet waits, at most max, until the other processes on the machine use less than a
// quarter of a core over half a second. Between runs the servers under test are idle, so what
// is busy then is someone else.
func (l *lab) waitQuiet(max time.Duration) {
	deadline := time.Now().Add(max)
	for l.ctx.Err() == nil {
		b0, t0 := busyTime(), time.Now()
		time.Sleep(500 * time.Millisecond)
		if cores := float64(busyTime()-b0) / float64(time.Since(t0)); cores < 0.25 || time.Now().After(deadline) {
			return
		}
	}
}

// A cpuMeter measures, over a run, the server's CPU time and what the rest of the machine used.
type cpuMeter struct {
	server      *server
	busy, own   time.Duration
	serverStart time.Duration
	start       time.Time
}

func startMeter(s *server) cpuMeter {
	return cpuMeter{server: s, busy: busyTime(), own: ownTime(), serverStart: treeCPU(s.roots()), start: time.Now()}
}

// stop returns the server's CPU time and the cores, on average, that processes other than the
// server, this program and its load generators kept busy.
func (m cpuMeter) stop() (server time.Duration, otherCores float64) {
	server = treeCPU(m.server.roots()) - m.serverStart
	other := busyTime() - m.busy - server - (ownTime() - m.own)
	if other < 0 {
		other = 0
	}
	return server, float64(other) / float64(time.Since(m.start))
}
