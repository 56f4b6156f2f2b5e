package mockworker

import (
	"container/list"
	"context"
	"sync"
)

// Gate parks requests before their first token until a test releases them.
// Use its Wait method as Config.Hold (directly, or from a Hold function that
// parks only some requests). A parked request keeps its running slot, so a
// gate lets a test hold a worker at a known number of in-flight requests
// that have produced no token, as preemption tests need.
//
// A new Gate is holding: every Wait parks. Release lets parked requests go
// oldest first; releases beyond the parked count are kept as credits that
// let later arrivals through without parking. Open lets everything through
// until Hold is called again. A Gate is safe for concurrent use and may be
// shared by several workers.
type Gate struct {
	// mu guards every field below it.
	mu      sync.Mutex
	open    bool
	credits int
	parked  *list.List // Of *parkedRequest, oldest first.
	// changed is closed and replaced whenever parked changes (WaitParked).
	changed chan struct{}
}

type parkedRequest struct {
	id      string
	release chan struct{} // Closed when released.
}

// NewGate returns a holding gate with nothing parked.
func NewGate() *Gate {
	return &Gate{parked: list.New(), changed: make(chan struct{})}
}

// Wait parks the request until it is released, returning nil, or until ctx
// ends, returning ctx's error. It returns at once if the gate is open or
// holds a release credit.
func (g *Gate) Wait(ctx context.Context, req RequestInfo) error {
	g.mu.Lock()
	if g.open {
		g.mu.Unlock()
		return nil
	}
	if g.credits > 0 {
		g.credits--
		g.mu.Unlock()
		return nil
	}
	p := &parkedRequest{id: req.ID, release: make(chan struct{})}
	elem := g.parked.PushBack(p)
	g.notifyLocked()
	g.mu.Unlock()

	select {
	case <-p.release:
		return nil
	case <-ctx.Done():
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-p.release: // Released meanwhile: the release wins.
		return nil
	default:
	}
	g.parked.Remove(elem)
	g.notifyLocked()
	return ctx.Err()
}

// Release lets the n oldest parked requests go; any of n left over lets
// that many later arrivals pass without parking. A non-positive n does
// nothing.
func (g *Gate) Release(n int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.grantLocked(n)
}

// ReleaseID lets the parked request with the given ID go and reports
// whether one was parked.
func (g *Gate) ReleaseID(id string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	for e := g.parked.Front(); e != nil; e = e.Next() {
		if p := e.Value.(*parkedRequest); p.id == id {
			g.parked.Remove(e)
			close(p.release)
			g.notifyLocked()
			return true
		}
	}
	return false
}

// Open releases every parked request and lets all later ones through.
func (g *Gate) Open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.open = true
	g.credits = 0
	g.grantLocked(g.parked.Len())
}

// Hold makes the gate park arrivals again and drops unused credits.
func (g *Gate) Hold() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.open = false
	g.credits = 0
}

// Parked returns the IDs of the parked requests, oldest first.
func (g *Gate) Parked() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	ids := make([]string, 0, g.parked.Len())
	for e := g.parked.Front(); e != nil; e = e.Next() {
		ids = append(ids, e.Value.(*parkedRequest).id)
	}
	return ids
}

// WaitParked blocks until at least n requests are parked or ctx ends.
func (g *Gate) WaitParked(ctx context.Context, n int) error {
	for {
		g.mu.Lock()
		parked, changed := g.parked.Len(), g.changed
		g.mu.Unlock()
		if parked >= n {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

// grantLocked releases up to n parked requests, oldest first, and keeps the
// rest of n as credits (none while open).
func (g *Gate) grantLocked(n int) {
	for ; n > 0 && g.parked.Len() > 0; n-- {
		p := g.parked.Remove(g.parked.Front()).(*parkedRequest)
		close(p.release)
		g.notifyLocked()
	}
	if n > 0 && !g.open {
		g.credits += n
	}
}

func (g *Gate) notifyLocked() {
	close(g.changed)
	g.changed = make(chan struct{})
}
