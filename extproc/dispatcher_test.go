package extproc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/tollgate/tollgate/extproc/fleet"
	"github.com/tollgate/tollgate/sched"
)

// fakeScheduler scripts the scheduler's answers: each call returns the
// actions its function gives, and every call is recorded.
type fakeScheduler struct {
	mu       sync.Mutex
	calls    []string
	submit   func(sched.Request) []sched.Action
	release  func(uint64) []sched.Action
	tick     func(time.Time) []sched.Action
	deadline time.Time
}

var _ scheduler = (*fakeScheduler)(nil)

func (f *fakeScheduler) record(c string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, c)
}

func (f *fakeScheduler) got() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

func (f *fakeScheduler) Submit(_ time.Time, r sched.Request) []sched.Action {
	f.record("submit " + itoa(int(r.ID)))
	if f.submit == nil {
		return nil
	}
	return f.submit(r)
}

func (f *fakeScheduler) Release(_ time.Time, id uint64) []sched.Action {
	f.record("release " + itoa(int(id)))
	if f.release == nil {
		return nil
	}
	return f.release(id)
}

func (f *fakeScheduler) FirstToken(_ time.Time, id uint64) []sched.Action {
	f.record("first " + itoa(int(id)))
	return nil
}

func (f *fakeScheduler) Tick(now time.Time) []sched.Action {
	f.record("tick")
	f.mu.Lock()
	f.deadline = time.Time{}
	f.mu.Unlock()
	if f.tick == nil {
		return nil
	}
	return f.tick(now)
}

func (f *fakeScheduler) SetWorkers(_ time.Time, ws []sched.Worker) []sched.Action {
	f.record("workers " + itoa(len(ws)))
	return nil
}

func (f *fakeScheduler) ReportLoad(_ time.Time, loads []sched.EngineLoad) []sched.Action {
	f.record("engine " + itoa(len(loads)))
	return nil
}

func (f *fakeScheduler) Drain(time.Time) []sched.Action {
	f.record("drain")
	return nil
}

func (f *fakeScheduler) Resume() { f.record("resume") }

func (f *fakeScheduler) NextDeadline() (time.Time, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.deadline, !f.deadline.IsZero()
}

func (f *fakeScheduler) RouteIn(model string, _ []string) (string, uint32, bool) {
	f.record("route " + model)
	return "w0", 0, true
}

func (f *fakeScheduler) Served(_ time.Time, id uint64, worker string, rank uint32) []sched.Action {
	f.record(fmt.Sprintf("served %d %s/%d", id, worker, rank))
	return nil
}

func (f *fakeScheduler) Adopt(_ time.Time, r sched.Request, b sched.Booking) []sched.Action {
	f.record(fmt.Sprintf("adopt %d %s/%d", r.ID, b.Worker, b.Rank))
	return nil
}

func (f *fakeScheduler) Usage(_ time.Time, id, prompt, completion uint64) []sched.Action {
	f.record(fmt.Sprintf("usage %d %d+%d", id, prompt, completion))
	return nil
}

func (f *fakeScheduler) Stats() sched.Stats { return sched.Stats{Capacity: 7} }

// runDispatcher runs a dispatcher over f until the test ends. Call it
// inside a synctest bubble.
func runDispatcher(t *testing.T, f *fakeScheduler) *dispatcher {
	t.Helper()
	ws, err := fleet.NewSet(oneWorker)
	if err != nil {
		t.Fatal(err)
	}
	d := newDispatcher(f, ws, slog.New(slog.DiscardHandler), dispatcherHooks{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); d.run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return d
}

// chanBox is a notice box over a channel of noticeCap.
type chanBox chan notice

func (b chanBox) put(n notice) bool {
	select {
	case b <- n:
		return true
	default:
		return false
	}
}

// submit hands request id to the dispatcher and returns its notice box.
func submit(t *testing.T, d *dispatcher, id uint64) chanBox {
	t.Helper()
	box := make(chanBox, noticeCap)
	if err := d.send(context.Background(), &event{kind: evSubmit, id: id, req: sched.Request{ID: id}, box: box, at: time.Now()}); err != nil {
		t.Fatal(err)
	}
	return box
}

// notices returns what is in a box once the bubble is idle, as
// "kind[:outcome|:address]" strings.
func notices(box chanBox) []string {
	synctest.Wait()
	var out []string
	for {
		select {
		case n := <-box:
			out = append(out, n.String())
		default:
			return out
		}
	}
}

func TestDispatcher_DeliversNoticesWithoutBlocking(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeScheduler{}
		f.submit = func(r sched.Request) []sched.Action {
			switch r.ID {
			case 1: // dispatched at once
				return []sched.Action{{Kind: sched.ActionDispatch, ID: 1, Worker: "w0"}}
			case 2: // queued
				return []sched.Action{{Kind: sched.ActionQueue, ID: 2}}
			default: // 3 dispatches the queued 2 and preempts 1
				return []sched.Action{{Kind: sched.ActionPreempt, ID: 1}, {Kind: sched.ActionDispatch, ID: 2, Worker: "w0"}, {Kind: sched.ActionReject, ID: 3, Outcome: sched.OutcomeQueueFull}}
			}
		}
		d := runDispatcher(t, f)
		b1 := submit(t, d, 1)
		if diff := cmp.Diff([]string{"dispatched:10.0.0.7:8000"}, notices(b1)); diff != "" {
			t.Fatalf("request 1 (-want +got):\n%s", diff)
		}
		b2 := submit(t, d, 2)
		if diff := cmp.Diff([]string{"queued"}, notices(b2)); diff != "" {
			t.Fatalf("request 2 (-want +got):\n%s", diff)
		}
		b3 := submit(t, d, 3)
		if diff := cmp.Diff([]string{"rejected:queue_full"}, notices(b3)); diff != "" {
			t.Fatalf("request 3 (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff([]string{"dispatched:10.0.0.7:8000"}, notices(b2)); diff != "" {
			t.Fatalf("request 2 after 3 (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff([]string{"preempted"}, notices(b1)); diff != "" {
			t.Fatalf("request 1 after 3 (-want +got):\n%s", diff)
		}
		for _, ev := range []event{{kind: evRelease, id: 1}, {kind: evFirstToken, id: 2}, {kind: evRelease, id: 2}} {
			if err := d.send(context.Background(), &ev); err != nil {
				t.Fatal(err)
			}
		}
		if r, err := d.call(context.Background(), &event{kind: evStats}); err != nil || r.stats.Capacity != 7 {
			t.Fatalf("stats %+v %v", r, err)
		}
		want := []string{"submit 1", "submit 2", "submit 3", "release 1", "first 2", "release 2"}
		if diff := cmp.Diff(want, f.got()); diff != "" {
			t.Errorf("calls (-want +got):\n%s", diff)
		}
		if len(d.boxes) != 0 {
			t.Errorf("boxes left: %v", d.boxes)
		}
	})
}

// TestDispatcher_NoticeBoxNeverBlocks: a stream that reads nothing gets
// at most one notice of each kind, which its box holds; the dispatcher
// goes on serving others.
func TestDispatcher_NoticeBoxNeverBlocks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeScheduler{}
		f.submit = func(r sched.Request) []sched.Action {
			if r.ID == 1 {
				return []sched.Action{{Kind: sched.ActionQueue, ID: 1}}
			}
			return []sched.Action{{Kind: sched.ActionDispatch, ID: 1, Worker: "w0"}, {Kind: sched.ActionPreempt, ID: 1}, {Kind: sched.ActionDispatch, ID: r.ID, Worker: "w0"}}
		}
		d := runDispatcher(t, f)
		b1 := submit(t, d, 1)
		b2 := submit(t, d, 2)
		synctest.Wait()
		if len(b1) != noticeCap {
			t.Fatalf("box 1 holds %d notices, want %d", len(b1), noticeCap)
		}
		if diff := cmp.Diff([]string{"queued", "dispatched:10.0.0.7:8000", "preempted"}, notices(b1)); diff != "" {
			t.Errorf("request 1 (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff([]string{"dispatched:10.0.0.7:8000"}, notices(b2)); diff != "" {
			t.Errorf("request 2 (-want +got):\n%s", diff)
		}
	})
}

func TestDispatcher_DispatchOutsideTheWorkerSetIsUndone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeScheduler{submit: func(r sched.Request) []sched.Action {
			return []sched.Action{{Kind: sched.ActionDispatch, ID: r.ID, Worker: "ghost"}}
		}}
		d := runDispatcher(t, f)
		if diff := cmp.Diff([]string{"rejected:no_endpoints"}, notices(submit(t, d, 4))); diff != "" {
			t.Fatalf("(-want +got):\n%s", diff)
		}
		if diff := cmp.Diff([]string{"submit 4", "release 4"}, f.got()); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
	})
}

// TestDispatcher_TicksAtTheNextDeadline runs in a synctest bubble: the
// tick must come exactly at the deadline the scheduler gave, on the fake
// clock, however slowly the machine runs.
func TestDispatcher_TicksAtTheNextDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var (
			mu       sync.Mutex // the dispatcher writes, the test reads
			deadline time.Time
			ticks    []time.Time
		)
		f := &fakeScheduler{}
		f.submit = func(sched.Request) []sched.Action {
			mu.Lock()
			deadline = time.Now().Add(20 * time.Millisecond)
			mu.Unlock()
			f.mu.Lock()
			f.deadline = deadline
			f.mu.Unlock()
			return []sched.Action{{Kind: sched.ActionQueue, ID: 5}}
		}
		f.tick = func(now time.Time) []sched.Action {
			mu.Lock()
			ticks = append(ticks, now)
			mu.Unlock()
			return []sched.Action{{Kind: sched.ActionReject, ID: 5, Outcome: sched.OutcomeQueueTimeout, Queued: true}}
		}
		d := runDispatcher(t, f)
		box := submit(t, d, 5)
		if diff := cmp.Diff([]string{"queued"}, notices(box)); diff != "" {
			t.Fatalf("after submit (-want +got):\n%s", diff)
		}
		time.Sleep(20*time.Millisecond - time.Nanosecond)
		synctest.Wait()
		mu.Lock()
		early := slices.Clone(ticks)
		mu.Unlock()
		if len(early) != 0 {
			t.Fatalf("ticked at %v, before the deadline", early)
		}
		time.Sleep(time.Nanosecond)
		if diff := cmp.Diff([]string{"rejected:queue_timeout"}, notices(box)); diff != "" {
			t.Fatalf("after the deadline (-want +got):\n%s", diff)
		}
		mu.Lock()
		defer mu.Unlock()
		if diff := cmp.Diff([]time.Time{deadline}, ticks); diff != "" {
			t.Errorf("ticks (-want +got):\n%s", diff)
		}
	})
}

// TestDispatcher_ServingState: the dispatcher owns leadership and
// shutdown and publishes each change; the scheduler's drain follows
// standby and the shedding, and its resume only leadership regained before
// the shedding.
func TestDispatcher_ServingState(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeScheduler{}
		var seen []serving
		ws, _ := fleet.NewSet(oneWorker)
		d := newDispatcher(f, ws, slog.New(slog.DiscardHandler), dispatcherHooks{serving: func(v serving) { seen = append(seen, v) }})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); d.run(ctx) }()
		defer func() { cancel(); <-done }()
		for _, ev := range []event{{kind: evActive}, {kind: evActive}, {kind: evActive, active: true}, {kind: evDrain}, {kind: evActive}, {kind: evShed}, {kind: evActive, active: true}} {
			if _, err := d.call(context.Background(), &ev); err != nil {
				t.Fatal(err)
			}
		}
		want := []serving{
			{workers: 1}, // at construction
			{standby: true, workers: 1},
			{workers: 1, acquisitions: 1},
			{draining: true, workers: 1, acquisitions: 1},
			{standby: true, draining: true, workers: 1, acquisitions: 1},
			{draining: true, workers: 1, acquisitions: 2},
		}
		if diff := cmp.Diff(want, seen, cmp.AllowUnexported(serving{})); diff != "" {
			t.Errorf("snapshots (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff([]string{"drain", "resume", "drain", "drain"}, f.got()); diff != "" {
			t.Errorf("scheduler calls (-want +got):\n%s", diff)
		}
		if d.serving().ready() {
			t.Error("a draining replica is ready")
		}
	})
}

func TestDispatcher_SendAfterStopFails(t *testing.T) {
	ws, _ := fleet.NewSet(nil)
	d := newDispatcher(&fakeScheduler{}, ws, slog.New(slog.DiscardHandler), dispatcherHooks{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	d.run(ctx)
	if err := d.send(context.Background(), &event{kind: evRelease}); !errors.Is(err, errStopped) {
		t.Fatalf("send after stop: %v", err)
	}
	if _, err := d.call(context.Background(), &event{kind: evStats}); !errors.Is(err, errStopped) {
		t.Fatalf("call after stop: %v", err)
	}
}

// TestDispatcher_CallBeforeRunAndAfterStop: a call is applied at once,
// before run too, unless its context ended; once run has returned, it
// gets errStopped.
func TestDispatcher_CallBeforeRunAndAfterStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ws, _ := fleet.NewSet(nil)
		d := newDispatcher(&fakeScheduler{}, ws, slog.New(slog.DiscardHandler), dispatcherHooks{})
		if r, err := d.call(context.Background(), &event{kind: evStats}); err != nil || r.stats.Capacity != 7 {
			t.Fatalf("call before run: %+v %v", r, err)
		}
		ended, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := d.call(ended, &event{kind: evStats}); !errors.Is(err, context.Canceled) {
			t.Fatalf("call with an ended context: %v", err)
		}
		runCtx, stop := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); d.run(runCtx) }()
		if r, err := d.call(context.Background(), &event{kind: evStats}); err != nil || r.stats.Capacity != 7 {
			t.Fatalf("call while running: %+v %v", r, err)
		}
		stop()
		<-done
		if _, err := d.call(context.Background(), &event{kind: evStats}); !errors.Is(err, errStopped) {
			t.Fatalf("call after stop: %v", err)
		}
	})
}
