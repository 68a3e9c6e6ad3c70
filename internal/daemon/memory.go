package daemon

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"syscall"
	"time"
)

// The daemon's resident memory (docs/operations.md, "The daemon's own memory") is more the
// executable mapped into it than its heap: the binary holds about 16 MiB of code, read-only
// data and function tables (every dependency's, ACME and Redis included), and starting the
// server touches most of them once (each package's initialiser, the config, the workers' boot),
// while serving touches a part. The heap is small: under load it cycles under the garbage
// collector's 4 MiB floor. What is here gives back what serving does not use, once after the
// start and whenever the load subsides, never on the request path.

// idlePeriod is how long the daemon goes without a garbage collection before trimWhenIdle
// counts it idle: a busy server collects many times a second.
const idlePeriod = 10 * time.Second

// releaseStartupMemory gives back, once the server has started, what only the start used: the
// heap's garbage (a collection, then its free pages to the system), then the mappings of the
// executable's read-only pages (releaseExecutablePages). Failing to is not an error worth
// stopping for; it is logged at debug level.
func releaseStartupMemory(log *slog.Logger) {
	debug.FreeOSMemory() // first: the collection walks the stacks, through the function tables
	if err := releaseExecutablePages(); err != nil {
		log.Debug("the executable's start-up pages stay mapped", "err", err)
	}
}

// releaseExecutablePages drops this process's mappings of the executable's read-only pages
// (madvise MADV_DONTNEED). They are clean pages of the file: the kernel keeps them in its page
// cache, shared, and reclaims them only under memory pressure; the code the requests run maps
// them again at its first use, a minor fault each. The resident set then holds what serving
// touches instead of what starting touched. Writable mappings are left alone, since their pages
// may hold data, and so is a read-only mapping with private (anonymous) pages in it.
func releaseExecutablePages() error {
	// Matched by inode, not by name: a binary replaced on disk shows as "(deleted)".
	st, err := os.Stat("/proc/self/exe")
	if err != nil {
		return err
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("/proc/self/exe: no inode")
	}
	inode := strconv.FormatUint(sys.Ino, 10)
	smaps, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		return err
	}
	type span struct {
		start, end uintptr
		private    bool // holds anonymous (copied-on-write) pages
	}
	var spans []span
	var cur *span
	sc := bufio.NewScanner(bytes.NewReader(smaps))
	for sc.Scan() {
		fields := bytes.Fields(sc.Bytes())
		if len(fields) >= 6 && bytes.IndexByte(fields[0], '-') > 0 { // a mapping's first line
			cur = nil
			perms := fields[1]
			if string(fields[4]) != inode || len(perms) < 2 || perms[1] == 'w' {
				continue
			}
			lo, hi, _ := bytes.Cut(fields[0], []byte("-"))
			start, err1 := strconv.ParseUint(string(lo), 16, 64)
			end, err2 := strconv.ParseUint(string(hi), 16, 64)
			if err1 != nil || err2 != nil {
				return fmt.Errorf("/proc/self/smaps: a mapping %q", fields[0])
			}
			spans = append(spans, span{start: uintptr(start), end: uintptr(end)})
			cur = &spans[len(spans)-1]
			continue
		}
		if cur != nil && len(fields) >= 2 && string(fields[0]) == "Anonymous:" && string(fields[1]) != "0" {
			cur.private = true
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	if len(spans) == 0 {
		return fmt.Errorf("no read-only mapping of the executable (inode %s) in /proc/self/smaps", inode)
	}
	for _, s := range spans {
		if s.private {
			continue
		}
		if _, _, errno := syscall.Syscall(syscall.SYS_MADVISE, s.start, s.end-s.start, syscall.MADV_DONTNEED); errno != 0 {
			return fmt.Errorf("madvise %#x-%#x: %w", s.start, s.end, errno)
		}
	}
	return nil
}

// trimWhenIdle returns the heap's garbage and free pages to the system once the load has
// subsided: when a whole period has gone by without a garbage collection and more than minFree
// bytes of the heap are free pages or garbage (allocated since the last collection and not
// live then). The runtime alone keeps the heap it grew under load (up to the collector's goal,
// 4 MiB at least) until the next collection, which an idle server runs every two minutes, and
// its scavenger returns free pages slowly; this collects an idle heap and returns it at once,
// and drops the executable's pages the burst mapped, as at the start. The next request maps
// again the few it runs through. It returns when ctx is cancelled.
func trimWhenIdle(ctx context.Context, period time.Duration, minFree uint64) {
	samples := []metrics.Sample{
		{Name: "/gc/cycles/total:gc-cycles"},
		{Name: "/memory/classes/heap/free:bytes"},    // free pages, not yet returned
		{Name: "/memory/classes/heap/objects:bytes"}, // live and dead objects
		{Name: "/gc/heap/live:bytes"},                // live at the last collection
	}
	metrics.Read(samples)
	for _, s := range samples {
		if s.Value.Kind() != metrics.KindUint64 {
			return // a runtime without these metrics: the scavenger alone
		}
	}
	cycles := samples[0].Value.Uint64()
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		metrics.Read(samples)
		free, objects, live := samples[1].Value.Uint64(), samples[2].Value.Uint64(), samples[3].Value.Uint64()
		if samples[0].Value.Uint64() == cycles && free+max(objects, live)-live > minFree {
			debug.FreeOSMemory()
			_ = releaseExecutablePages() // what the burst's code mapped; it worked at the start
			metrics.Read(samples)
		}
		cycles = samples[0].Value.Uint64()
	}
}
