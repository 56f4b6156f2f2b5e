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
	before, err := ProcCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	for end := time.Now().Add(50 * time.Millisecond); time.Now().Before(end); {
	}
	after, err := ProcCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if after-before < 10*time.Millisecond {
		t.Errorf("50 ms of spinning counted as %v of CPU", after-before)
	}
	if _, err := ProcRSS(1 << 30); err == nil {
		t.Error("RSS of a process that does not exist")
	}
	if _, err := ProcCPU(1 << 30); err == nil {
		t.Error("CPU of a process that does not exist")
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
