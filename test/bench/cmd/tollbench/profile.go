package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tollgate/tollgate/test/bench"
)

// Profile phase timing: the CPU profile covers the middle of the load.
const (
	profileWarmup  = 2 * time.Second
	profileSeconds = 8
)

// profilePhase runs the BUFFERED load at the highest concurrency against
// the harness build of the server and saves its CPU and allocation
// profiles with their top functions.
func (r *runner) profilePhase(ctx context.Context) (err error) {
	w, waddr, err := r.startWorker(ctx, "profile-worker")
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, w.stop()) }()
	workers, err := r.writeWorkers("workers-profile.yaml", waddr, 0)
	if err != nil {
		return err
	}
	srv, err := startChild(ctx, "profile-harness", r.logs, []string{r.self, "serve", "--workers", workers})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, srv.stop()) }()
	ext, err := srv.addr("grpc")
	if err != nil {
		return err
	}
	metrics, err := srv.addr("metrics")
	if err != nil {
		return err
	}
	c := slices.Max(r.o.conc)
	loadc := make(chan error, 1)
	go func() {
		_, err := r.load(ctx, "profile-load", ext, bench.ModeBuffered, c, profileWarmup, (profileSeconds+2)*time.Second)
		loadc <- err
	}()
	time.Sleep(profileWarmup + time.Second)
	cpu := filepath.Join(r.o.out, "cpu.prof")
	r.progress("profile: CPU profile of the harness server for %d s under BUFFERED load at concurrency %d", profileSeconds, c)
	cpuErr := fetch(ctx, "http://"+metrics+"/debug/pprof/profile?seconds="+strconv.Itoa(profileSeconds), cpu)
	if err := <-loadc; err != nil {
		return err
	}
	if cpuErr != nil {
		return cpuErr
	}
	allocs := filepath.Join(r.o.out, "allocs.prof")
	if err := fetch(ctx, "http://"+metrics+"/debug/pprof/allocs", allocs); err != nil {
		return err
	}
	cpuTop, err := pprofTop(ctx, cpu, filepath.Join(r.o.out, "cpu-top.txt"))
	if err != nil {
		return err
	}
	allocTop, err := pprofTop(ctx, allocs, filepath.Join(r.o.out, "allocs-top.txt"), "-sample_index=alloc_space")
	if err != nil {
		return err
	}
	cum, err := pprofCum(ctx, cpu)
	if err != nil {
		return err
	}
	r.report.Notes = append(r.report.Notes,
		fmt.Sprintf("Profiles (PROFILE=1) are of a harness build of the server code (tollbench serve: extproc.Server with tollgate's default flags and /debug/pprof/), "+
			"not of the tollgate binary, under the BUFFERED load at concurrency %d: %s, %s, top functions in cpu-top.txt and allocs-top.txt.", c, cpu, allocs),
		"CPU by package (flat): "+byPackage(cpuTop),
		"CPU by activity (cumulative, overlapping): "+activities(cum),
		"Allocated bytes by package (flat): "+byPackage(allocTop))
	return nil
}

// cpuActivities are the subtrees of the CPU profile worth naming, with the
// function at their root.
var cpuActivities = []struct{ label, fn string }{
	{"stream handler (Process)", "github.com/tollgate/tollgate/extproc.(*Server).Process"},
	{"exchange message handling", "github.com/tollgate/tollgate/extproc.(*exchange).message"},
	{"request planning (parse, estimate, hash, prefix lookup)", "github.com/tollgate/tollgate/extproc/intake.(*Planner).Build"},
	{"openai.Parse", "github.com/tollgate/tollgate/extproc/request/openai.Parse"},
	{"of which the JSON syntax check", "github.com/tollgate/tollgate/extproc/request/openai.topFields"},
	{"prefix lookup", "github.com/tollgate/tollgate/extproc/intake.(*CacheView).Lookup"},
	{"response usage scanner", "github.com/tollgate/tollgate/extproc/request/openai.(*UsageScanner).Feed"},
	{"gRPC receive (Recv, on whichever goroutine calls it)", "google.golang.org/grpc.(*serverStream).RecvMsg"},
	{"proto unmarshal", "google.golang.org/protobuf/proto.Unmarshal"},
	{"gRPC send", "google.golang.org/grpc.(*serverStream).SendMsg"},
	{"dispatcher: submits (on the stream goroutine)", "github.com/tollgate/tollgate/extproc.(*dispatcher).submit"},
	{"dispatcher: other events", "github.com/tollgate/tollgate/extproc.(*dispatcher).call"},
	{"notice senders", "github.com/tollgate/tollgate/extproc.(*senderPool).run"},
	{"select", "runtime.selectgo"},
	{"timers (first message, deadlines)", "time.AfterFunc"},
	{"stack growth", "runtime.newstack"},
	{"malloc", "runtime.mallocgc"},
	{"GC workers", "runtime.gcBgMarkWorker"},
	{"goroutine scheduling", "runtime.schedule"},
}

// pprofCum returns the cumulative share of every function in prof.
func pprofCum(ctx context.Context, prof string) (map[string]float64, error) {
	text, err := exec.CommandContext(ctx, "go", "tool", "pprof", "-top", "-cum", "-nodecount=100000", prof).Output()
	if err != nil {
		return nil, fmt.Errorf("go tool pprof %s: %w", prof, err)
	}
	cum := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(string(text)))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 6 || !strings.HasSuffix(f[4], "%") {
			continue
		}
		if pct, err := strconv.ParseFloat(strings.TrimSuffix(f[4], "%"), 64); err == nil {
			cum[funcName(f[5:])] = pct
		}
	}
	return cum, nil
}

// activities lists the named subtrees present in cum.
func activities(cum map[string]float64) string {
	var parts []string
	for _, a := range cpuActivities {
		if v, ok := cum[a.fn]; ok {
			parts = append(parts, fmt.Sprintf("%s %.1f%%", a.label, v))
		}
	}
	return strings.Join(parts, ", ")
}

// fetch saves the body of url to path.
func fetch(ctx context.Context, url, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: HTTP %d", url, resp.StatusCode)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// topEntry is one function of `go tool pprof -top`.
type topEntry struct {
	flatPct float64
	name    string
}

// pprofTop runs `go tool pprof -top` on prof, saves the text and returns
// every function with its flat share.
func pprofTop(ctx context.Context, prof, out string, extra ...string) ([]topEntry, error) {
	args := append([]string{"tool", "pprof", "-top", "-nodecount=100000"}, extra...)
	text, err := exec.CommandContext(ctx, "go", append(args, prof)...).Output()
	if err != nil {
		return nil, fmt.Errorf("go tool pprof %s: %w", prof, err)
	}
	if err := os.WriteFile(out, text, 0o644); err != nil {
		return nil, err
	}
	var entries []topEntry
	sc := bufio.NewScanner(strings.NewReader(string(text)))
	for sc.Scan() {
		// flat flat% sum% cum cum% name...
		f := strings.Fields(sc.Text())
		if len(f) < 6 || !strings.HasSuffix(f[1], "%") {
			continue
		}
		pct, err := strconv.ParseFloat(strings.TrimSuffix(f[1], "%"), 64)
		if err != nil {
			continue
		}
		entries = append(entries, topEntry{flatPct: pct, name: funcName(f[5:])})
	}
	return entries, nil
}

// funcName joins the name fields of a pprof -top line, without the
// "(inline)" marker.
func funcName(fields []string) string {
	return strings.TrimSuffix(strings.Join(fields, " "), " (inline)")
}

// byPackage sums flat shares by package and lists the largest.
func byPackage(entries []topEntry) string {
	sum := map[string]float64{}
	for _, e := range entries {
		sum[packageOf(e.name)] += e.flatPct
	}
	pkgs := make([]string, 0, len(sum))
	for p := range sum {
		pkgs = append(pkgs, p)
	}
	slices.SortFunc(pkgs, func(a, b string) int {
		if sum[a] != sum[b] {
			if sum[a] > sum[b] {
				return -1
			}
			return 1
		}
		return strings.Compare(a, b)
	})
	var parts []string
	for _, p := range pkgs[:min(len(pkgs), 10)] {
		parts = append(parts, fmt.Sprintf("%s %.1f%%", p, sum[p]))
	}
	return strings.Join(parts, ", ")
}

// packageOf returns the import path of a pprof function name such as
// "google.golang.org/grpc/internal/transport.(*http2Server).operateHeaders".
func packageOf(fn string) string {
	slash := strings.LastIndexByte(fn, '/')
	dot := strings.IndexByte(fn[slash+1:], '.')
	if dot < 0 {
		return fn
	}
	return fn[:slash+1+dot]
}
