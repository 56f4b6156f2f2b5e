package bench

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestProcRSSAndCPU(t *testing.T) {
	rss, err := ProcRSS(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if rss < 1<<20 {
		t.Errorf("RSS of the test process %d bytes, want at least 1 MiB", rss)
	}
	// Spin until the process's CPU time has grown by 10 ms. How long that
	// takes depends on the machine's load, so the wall clock only bounds a
	// reading that never grows.
	before, err := ProcCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	for ceiling := time.Now().Add(time.Minute); ; {
		now, err := ProcCPU(os.Getpid())
		if err != nil {
			t.Fatal(err)
		}
		if now-before >= 10*time.Millisecond {
			break
		}
		if time.Now().After(ceiling) {
			t.Fatalf("a minute of spinning counted as %v of CPU", now-before)
		}
		for end := time.Now().Add(time.Millisecond); time.Now().Before(end); {
		}
	}
	if _, err := ProcRSS(1 << 30); err == nil {
		t.Error("RSS of a process that does not exist")
	}
	if _, err := ProcCPU(1 << 30); err == nil {
		t.Error("CPU of a process that does not exist")
	}
}

func TestTasksCPU(t *testing.T) {
	dir := t.TempDir()
	write := func(tid, text string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(dir, "task", tid), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "task", tid, "schedstat"), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := tasksCPU(dir); err == nil {
		t.Error("CPU of a process without tasks")
	}
	write("10", "1500000 200 3\n")
	write("11", "2500000 0 1\n")
	if d, err := tasksCPU(dir); err != nil || d != 4*time.Millisecond {
		t.Errorf("tasksCPU = %v, %v; want 4ms, the sum of both threads", d, err)
	}
	write("12", "\n")
	if _, err := tasksCPU(dir); err == nil {
		t.Error("an empty schedstat was accepted")
	}
	write("12", "1.5 0 0\n")
	if _, err := tasksCPU(dir); err == nil {
		t.Error("a malformed schedstat was accepted")
	}
}

func TestProcStatusBytes(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	if err := os.WriteFile(good, []byte("Name:\tx\nVmRSS:\t   2048 kB\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if n, err := procStatusBytes(good, "VmRSS"); err != nil || n != 2048<<10 {
		t.Errorf("VmRSS = %d, %v; want %d", n, err, 2048<<10)
	}
	if _, err := procStatusBytes(good, "VmHWM"); err == nil {
		t.Error("a missing field was found")
	}
	bad := filepath.Join(dir, "bad")
	if err := os.WriteFile(bad, []byte("VmRSS:\t2 MB\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := procStatusBytes(bad, "VmRSS"); err == nil {
		t.Error("a value in MB was accepted")
	}
}

func TestMachineFacts(t *testing.T) {
	if CPUModel() == "" {
		t.Error("empty CPU model")
	}
	if LoadAverage() < 0 {
		t.Error("no load average")
	}
}
