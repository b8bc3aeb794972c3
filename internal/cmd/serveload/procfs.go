package main

// What the kernel says about the daemon: CPU time, resident memory, and the
// machine's load average.

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// userHZ is the unit of utime and stime in /proc/PID/stat. It is 100 on
// every Linux architecture Go supports (USER_HZ is fixed in the kernel's
// ABI, whatever CONFIG_HZ is).
const userHZ = 100

// procUsage is one reading of a process.
type procUsage struct {
	CPU      time.Duration // utime + stime
	RSS, HWM uint64        // bytes: VmRSS now, VmHWM (peak resident)
}

// readUsage reads /proc/PID/stat and /proc/PID/status under root
// ("/proc" normally).
func readUsage(root string, pid int) (procUsage, error) {
	dir := fmt.Sprintf("%s/%d", root, pid)
	stat, err := os.ReadFile(dir + "/stat")
	if err != nil {
		return procUsage{}, fmt.Errorf("read CPU time: %w", err)
	}
	cpu, err := parseStatCPU(stat)
	if err != nil {
		return procUsage{}, fmt.Errorf("%s/stat: %w", dir, err)
	}
	status, err := os.ReadFile(dir + "/status")
	if err != nil {
		return procUsage{}, fmt.Errorf("read memory: %w", err)
	}
	rss, hwm, err := parseStatusMemory(status)
	if err != nil {
		return procUsage{}, fmt.Errorf("%s/status: %w", dir, err)
	}
	return procUsage{CPU: cpu, RSS: rss, HWM: hwm}, nil
}

// parseStatCPU returns utime + stime from the contents of /proc/PID/stat.
// The command name (field 2) is in parentheses and may itself hold spaces
// and parentheses, so the fields are counted from the last ')'.
func parseStatCPU(b []byte) (time.Duration, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("no ')' after the command name")
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	const utime, stime = 14 - 3, 15 - 3
	if len(f) <= stime {
		return 0, fmt.Errorf("%d fields after the command name, want at least %d", len(f), stime+1)
	}
	// Each value, and so their sum, stays below what a Duration holds.
	const most = uint64(1<<62) / uint64(time.Second/userHZ)
	var ticks uint64
	for _, k := range []int{utime, stime} {
		v, err := strconv.ParseUint(f[k], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("field %d: %w", k+3, err)
		}
		if v > most {
			return 0, fmt.Errorf("field %d: CPU time %d ticks out of range", k+3, v)
		}
		ticks += v
	}
	return time.Duration(ticks) * (time.Second / userHZ), nil
}

// parseStatusMemory returns VmRSS and VmHWM, in bytes, from the contents
// of /proc/PID/status.
func parseStatusMemory(b []byte) (rss, hwm uint64, err error) {
	var haveRSS, haveHWM bool
	for line := range strings.Lines(string(b)) {
		name, rest, ok := strings.Cut(line, ":")
		if !ok || (name != "VmRSS" && name != "VmHWM") {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return 0, 0, fmt.Errorf("%s: %q: want a number of kB", name, strings.TrimSpace(rest))
		}
		v, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil || v > 1<<53 {
			return 0, 0, fmt.Errorf("%s: %q: want a number of kB", name, f[0])
		}
		if name == "VmRSS" {
			rss, haveRSS = v<<10, true
		} else {
			hwm, haveHWM = v<<10, true
		}
	}
	if !haveRSS || !haveHWM {
		return 0, 0, fmt.Errorf("no VmRSS or VmHWM line (a kernel thread, or a zombie)")
	}
	return rss, hwm, nil
}

// loadAvg returns the 1-minute load average from /proc/loadavg.
func loadAvg(root string) (float64, error) {
	b, err := os.ReadFile(root + "/loadavg")
	if err != nil {
		return 0, fmt.Errorf("read load average: %w", err)
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, fmt.Errorf("%s/loadavg is empty", root)
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return 0, fmt.Errorf("%s/loadavg: %w", root, err)
	}
	return v, nil
}
