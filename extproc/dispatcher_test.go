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

	"github.com/tollgate/tollgate/sched"
)

// fakeScheduler scripts the scheduler's answers: each call returns the
// actions its function gives, and every call is recorded.
type fakeScheduler struct {
	mu       sync.Mutex
	calls    []string
	submit   func(sched.Request) []sched.Action
	cancel   func(uint64) []sched.Action
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
	if f.cancel == nil {
		return nil
	}
	return f.cancel(id)
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

func (f *fakeScheduler) Stats() sched.Stats { return sched.Stats{Capacity: 7} }

// runDispatcher runs a dispatcher over f until the test ends.
func runDispatcher(t *testing.T, f *fakeScheduler) *dispatcher {
	t.Helper()
	ws, err := newWorkerSet(oneWorker)
	if err != nil {
		t.Fatal(err)
	}
	d := newDispatcher(f, ws, time.Now, slog.New(slog.DiscardHandler), nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); d.run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return d
}

func submit(t *testing.T, d *dispatcher, id uint64) *ticket {
	t.Helper()
	tk := newTicket(id)
	if err := d.send(context.Background(), event{kind: evSubmit, id: id, req: sched.Request{ID: id}, tk: tk, at: time.Now()}); err != nil {
		t.Fatal(err)
	}
	return tk
}

// wake waits for a ticket's signal.
func wake(t *testing.T, tk *ticket) ticketState {
	t.Helper()
	select {
	case <-tk.wake:
		return tk.load()
	case <-time.After(5 * time.Second):
		t.Fatal("ticket not signalled")
	}
	return ticketState{}
}

func TestDispatcher_DeliversDecisionsWithoutBlocking(t *testing.T) {
	f := &fakeScheduler{}
	f.submit = func(r sched.Request) []sched.Action {
		switch r.ID {
		case 1: // dispatched at once
			return []sched.Action{{Kind: sched.ActionDispatch, ID: 1, Worker: "w0"}}
		case 2: // queued
			return nil
		default: // 3 dispatches the queued 2 and preempts 1
			return []sched.Action{{Kind: sched.ActionPreempt, ID: 1}, {Kind: sched.ActionDispatch, ID: 2, Worker: "w0"}, {Kind: sched.ActionReject, ID: 3, Outcome: sched.OutcomeQueueFull}}
		}
	}
	d := runDispatcher(t, f)
	t1 := submit(t, d, 1)
	if st := wake(t, t1); !st.decided || st.queued || st.target.address != "10.0.0.7:8000" {
		t.Fatalf("ticket 1 %+v", st)
	}
	t2 := submit(t, d, 2)
	if st := wake(t, t2); !st.queued || st.decided {
		t.Fatalf("ticket 2 %+v", st)
	}
	// Nobody reads ticket 1 again: the dispatcher must not wait for it.
	t3 := submit(t, d, 3)
	if st := wake(t, t3); !st.decided || st.action.Outcome != sched.OutcomeQueueFull {
		t.Fatalf("ticket 3 %+v", st)
	}
	if st := wake(t, t2); !st.decided || st.action.Kind != sched.ActionDispatch {
		t.Fatalf("ticket 2 after 3 %+v", st)
	}
	if st := t1.load(); !st.preempted {
		t.Fatalf("ticket 1 not preempted: %+v", st)
	}
	d.notify(evCancel, 1)
	d.notify(evFirstToken, 2)
	d.notify(evDone, 2)
	if r, err := d.call(context.Background(), event{kind: evStats}); err != nil || r.stats.Capacity != 7 {
		t.Fatalf("stats %+v %v", r, err)
	}
	want := []string{"submit 1", "submit 2", "submit 3", "release 1", "first 2", "release 2"}
	if diff := cmp.Diff(want, f.got()); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
}

func TestDispatcher_DispatchOutsideTheWorkerSetIsUndone(t *testing.T) {
	f := &fakeScheduler{submit: func(r sched.Request) []sched.Action {
		return []sched.Action{{Kind: sched.ActionDispatch, ID: r.ID, Worker: "ghost"}}
	}}
	d := runDispatcher(t, f)
	st := wake(t, submit(t, d, 4))
	if st.action.Kind != sched.ActionReject || st.action.Outcome != sched.OutcomeNoEndpoints {
		t.Fatalf("%+v", st)
	}
	if _, err := d.call(context.Background(), event{kind: evStats}); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"submit 4", "release 4"}, f.got()); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// TestDispatcher_TicksAtTheNextDeadline runs in a synctest bubble: the
// queued signal and the tick's decision are observed one at a time, and the
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
			return nil
		}
		f.tick = func(now time.Time) []sched.Action {
			mu.Lock()
			ticks = append(ticks, now)
			mu.Unlock()
			return []sched.Action{{Kind: sched.ActionReject, ID: 5, Outcome: sched.OutcomeQueueTimeout, Queued: true}}
		}
		d := runDispatcher(t, f)
		tk := submit(t, d, 5)
		synctest.Wait() // the dispatcher handled the submit and waits on its timer
		if st := signalled(t, tk); !st.queued || st.decided {
			t.Fatalf("after submit: %+v", st)
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
		synctest.Wait()
		if st := signalled(t, tk); !st.decided || st.action.Outcome != sched.OutcomeQueueTimeout {
			t.Fatalf("after the deadline: %+v", st)
		}
		mu.Lock()
		defer mu.Unlock()
		if diff := cmp.Diff([]time.Time{deadline}, ticks); diff != "" {
			t.Errorf("ticks (-want +got):\n%s", diff)
		}
	})
}

// signalled returns the ticket's state if a signal is pending, and fails
// the test if none is. Use it after synctest.Wait.
func signalled(t *testing.T, tk *ticket) ticketState {
	t.Helper()
	select {
	case <-tk.wake:
		return tk.load()
	default:
		t.Fatal("ticket not signalled")
	}
	return ticketState{}
}

func TestDispatcher_DrainRejectsLaterSubmits(t *testing.T) {
	f := &fakeScheduler{}
	d := runDispatcher(t, f)
	if _, err := d.call(context.Background(), event{kind: evDrain}); err != nil {
		t.Fatal(err)
	}
	if st := wake(t, submit(t, d, 6)); st.action.Outcome != sched.OutcomeShutdown {
		t.Fatalf("%+v", st)
	}
	if diff := cmp.Diff([]string{"drain"}, f.got()); diff != "" {
		t.Errorf("the scheduler saw a submit while draining (-want +got):\n%s", diff)
	}
}

func TestDispatcher_SendAfterStopFails(t *testing.T) {
	ws, _ := newWorkerSet(nil)
	d := newDispatcher(&fakeScheduler{}, ws, time.Now, slog.New(slog.DiscardHandler), nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	d.run(ctx)
	if err := d.send(context.Background(), event{kind: evCancel}); !errors.Is(err, errStopped) {
		t.Fatalf("send after stop: %v", err)
	}
	d.notify(evDone, 1) // must not block
	if _, err := d.call(context.Background(), event{kind: evStats}); !errors.Is(err, errStopped) {
		t.Fatalf("call after stop: %v", err)
	}
}
