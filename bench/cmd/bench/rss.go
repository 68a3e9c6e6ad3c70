package main

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// procStat is what /proc/PID/stat says about a process's family.
type procStat struct {
	pid, ppid, pgrp int
	cpuTicks        int // utime + stime, in clock ticks
}

// clockTick is USER_HZ, the unit of utime and stime in /proc/PID/stat: 100 on every Linux
// architecture Go runs on.
const clockTick = 10 * time.Millisecond

// allStats reads /proc/*/stat of every process.
func allStats() []procStat {
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	out := make([]procStat, 0, len(dirs))
	for _, d := range dirs {
		b, err := os.ReadFile(d + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp ...; comm may hold spaces and parentheses.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 13 {
			continue
		}
		pid, _ := strconv.Atoi(filepath.Base(d))
		ppid, _ := strconv.Atoi(f[1])
		pgrp, _ := strconv.Atoi(f[2])
		utime, _ := strconv.Atoi(f[11])
		stime, _ := strconv.Atoi(f[12])
		out = append(out, procStat{pid, ppid, pgrp, utime + stime})
	}
	return out
}

// descendants returns root's children, grandchildren and so on (not root itself).
func descendants(root int, stats []procStat) []int {
	children := map[int][]int{}
	for _, s := range stats {
		children[s.ppid] = append(children[s.ppid], s.pid)
	}
	var out []int
	queue := []int{root}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}

// memKiB returns a process's resident set (VmRSS) and proportional set (Pss, shared pages
// divided among the processes that map them), in KiB; 0 when it is gone.
func memKiB(pid int) (rss, pss int) {
	rss = statusField(pid, "status", "VmRSS:")
	pss = statusField(pid, "smaps_rollup", "Pss:")
	return rss, pss
}

func statusField(pid int, file, key string) int {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/" + file)
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, key) {
			fs := strings.Fields(line[len(key):])
			if len(fs) > 0 {
				n, _ := strconv.Atoi(fs[0])
				return n
			}
		}
	}
	return 0
}

// treeMem is the memory of one process and its descendants.
type treeMem struct {
	rootRSS, rootPSS   int // KiB, the root (the daemon and workers.fork's template, the FPM master, the nginx master)
	childRSS, childPSS int // KiB, all descendants together
	children           int
}

func measureTree(root int) treeMem {
	var m treeMem
	m.rootRSS, m.rootPSS = memKiB(root)
	for _, c := range descendants(root, allStats()) {
		rss, pss := memKiB(c)
		if rss == 0 {
			continue
		}
		if isTemplate(c) { // workers.fork's template counts with the daemon, as FPM's master does
			m.rootRSS += rss
			m.rootPSS += pss
			continue
		}
		m.childRSS += rss
		m.childPSS += pss
		m.children++
	}
	return m
}

// isTemplate reports whether pid is the template workers.fork forks the workers from, which
// peregrine-php names peregrine-tmpl.
func isTemplate(pid int) bool {
	comm, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	return err == nil && strings.TrimSpace(string(comm)) == "peregrine-tmpl"
}

// treeCPU is the CPU time (user and system) used so far by the processes under the roots,
// roots included.
func treeCPU(roots []int) time.Duration {
	stats := allStats()
	ticks := map[int]int{}
	for _, s := range stats {
		ticks[s.pid] = s.cpuTicks
	}
	total := 0
	for _, r := range roots {
		total += ticks[r]
		for _, c := range descendants(r, stats) {
			total += ticks[c]
		}
	}
	return time.Duration(total) * clockTick
}
