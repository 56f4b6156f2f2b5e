package bench

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ProcRSS returns the resident set size (VmRSS) of process pid in bytes,
// read from /proc/<pid>/status.
func ProcRSS(pid int) (uint64, error) {
	return procStatusBytes(fmt.Sprintf("/proc/%d/status", pid), "VmRSS")
}

// ProcCPU returns the CPU time process pid has used so far, in all its
// threads, from the first field of /proc/<pid>/task/*/schedstat
// (nanoseconds on CPU). Threads that already exited are not counted, which
// suits Go processes: their threads live as long as the process.
func ProcCPU(pid int) (time.Duration, error) {
	return tasksCPU(fmt.Sprintf("/proc/%d", pid))
}

// SelfCPU returns the user and system CPU time this process has used so
// far, for a benchmark that runs its load in the same process.
func SelfCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru) // fails only for a bad who or pointer
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// tasksCPU sums the first field of dir/task/*/schedstat.
func tasksCPU(dir string) (time.Duration, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "task", "*", "schedstat"))
	if err != nil || len(paths) == 0 {
		return 0, fmt.Errorf("bench: no schedstat under %s", dir)
	}
	var total time.Duration
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			continue // the thread exited meanwhile
		}
		f := strings.Fields(string(data))
		if len(f) == 0 {
			return 0, fmt.Errorf("bench: %s is empty", p)
		}
		ns, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("bench: %s: %w", p, err)
		}
		total += time.Duration(ns)
	}
	return total, nil
}

// procStatusBytes reads a "Field:  N kB" line of a /proc status file.
func procStatusBytes(path, field string) (uint64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, fmt.Errorf("bench: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || k != field {
			continue
		}
		num, unit, _ := strings.Cut(strings.TrimSpace(v), " ")
		n, err := strconv.ParseUint(num, 10, 64)
		if err != nil || unit != "kB" {
			return 0, fmt.Errorf("bench: %s: malformed %s line %q", path, field, sc.Text())
		}
		return n << 10, nil
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("bench: %s: %w", path, err)
	}
	return 0, fmt.Errorf("bench: %s has no %s line", path, field)
}

// CPUModel returns the first "model name" of /proc/cpuinfo, or "unknown".
func CPUModel() string {
	data, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown"
	}
	for l := range strings.SplitSeq(string(data), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

// LoadAverage returns the 1-minute load average of /proc/loadavg, or -1.
func LoadAverage() float64 {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return -1
	}
	f := strings.Fields(string(data))
	if len(f) == 0 {
		return -1
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return -1
	}
	return v
}
