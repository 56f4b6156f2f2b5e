package extproc

import (
	"fmt"
	"log/slog"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate/tollgate/extproc/peer"
	"github.com/tollgate/tollgate/sched"
)

// recordingBox records the notices a stream gets.
type recordingBox struct{ got []noticeKind }

func (b *recordingBox) put(n notice) bool {
	if len(b.got) == noticeCap {
		return false
	}
	b.got = append(b.got, n.kind)
	return true
}

// relayModel drives a relay through a random sequence of the events a
// front meets (streams submitting and ending, first tokens, notices from
// the current and from older links, links made and lost) without
// starting goroutines: links are connected under the relay's lock as
// dial and setSelf do, and their queued messages are read directly.
type relayModel struct {
	t     *testing.T
	r     *relay
	rnd   *rand.Rand
	boxes map[uint64]*recordingBox
	// links are every link made; the current one is r.link.
	links  []*link
	nextID uint64
	now    time.Time
}

func newRelayModel(t *testing.T, seed uint64) *relayModel {
	r := newRelay(slog.New(slog.DiscardHandler), &ReplicaConfig{Identity: "front"}, newReplicaMetrics(prometheus.NewRegistry()))
	return &relayModel{t: t, r: r, rnd: rand.New(rand.NewPCG(seed, 1)), boxes: map[uint64]*recordingBox{}, now: time.Unix(1000, 0)}
}

// sent returns the messages queued on l so far.
func sent(l *link) []peer.Up {
	l.out.mu.Lock()
	defer l.out.mu.Unlock()
	return append([]peer.Up(nil), l.out.items...)
}

func (m *relayModel) step() error {
	r := m.r
	switch op := m.rnd.IntN(10); {
	case op < 3: // a stream submits
		m.nextID++
		m.now = m.now.Add(time.Millisecond)
		box := &recordingBox{}
		m.boxes[m.nextID] = box
		r.submit(&sched.Request{ID: m.nextID, Model: "m", Arrival: m.now}, box)
	case op < 5: // a stream ends
		if id := m.pick(); id != 0 {
			r.release(id)
			delete(m.boxes, id)
		}
	case op == 5:
		if id := m.pick(); id != 0 {
			r.firstToken(id)
		}
	case op < 8: // a notice, sometimes from an older link
		id := m.pick()
		if id == 0 {
			break
		}
		gen := r.gen
		if m.rnd.IntN(4) == 0 && gen > 0 {
			gen--
		}
		var n notice
		switch m.rnd.IntN(3) {
		case 0:
			n = notice{kind: noticeQueued}
		case 1:
			n = notice{kind: noticeDecided, decision: &decision{action: sched.Action{Kind: sched.ActionDispatch, Worker: "w", Rank: 1}}}
		default:
			n = notice{kind: noticeDecided, decision: &decision{action: sched.Action{Kind: sched.ActionReject}}}
		}
		r.notice(gen, id, n)
	case op == 8: // a new link
		r.mu.Lock()
		if old := r.link; old != nil {
			r.disconnect(old.gen)
		}
		r.gen++
		l := newLink(r.gen, "peer", nil, nil)
		m.links = append(m.links, l)
		r.connect(l)
		r.mu.Unlock()
		return m.checkBurst(l)
	default: // the link is lost
		r.mu.Lock()
		if l := r.link; l != nil {
			r.disconnect(l.gen)
		}
		r.mu.Unlock()
	}
	return m.check()
}

// pick returns a live request, or 0.
func (m *relayModel) pick() uint64 {
	if len(m.boxes) == 0 {
		return 0
	}
	i := m.rnd.IntN(len(m.boxes))
	for id := range m.boxes {
		if i == 0 {
			return id
		}
		i--
	}
	return 0
}

// checkBurst checks a new link's re-registration: every request the relay
// holds exactly once, in-flight ones (adopted with their booking) before
// queued ones (resumed when an earlier scheduler had them), queued ones by
// arrival, then the synced marker.
func (m *relayModel) checkBurst(l *link) error {
	msgs := sent(l)
	if len(msgs) != len(m.r.reqs)+1 || msgs[len(msgs)-1].Kind != peer.UpSynced {
		return fmt.Errorf("burst of %d messages for %d requests: %v", len(msgs), len(m.r.reqs), msgs)
	}
	seen := map[uint64]bool{}
	adopting := true
	var last time.Time
	for _, u := range msgs[:len(msgs)-1] {
		e := m.r.reqs[u.ID]
		switch {
		case e == nil || seen[u.ID]:
			return fmt.Errorf("burst names %d twice or unknown", u.ID)
		case u.Kind == peer.UpAdopt && (!adopting || !e.running || *u.Booking != e.booking):
			return fmt.Errorf("adoption of %d out of place or with the wrong booking", u.ID)
		case u.Kind == peer.UpSubmit && (e.running || u.Request.Arrival.Before(last)):
			return fmt.Errorf("resubmission of %d out of order or while running", u.ID)
		}
		if u.Kind == peer.UpSubmit {
			adopting, last = false, u.Request.Arrival
		}
		seen[u.ID] = true
	}
	return nil
}

// check compares the relay's requests with the streams' and what each
// stream was told.
func (m *relayModel) check() error {
	r := m.r
	for id, e := range r.reqs {
		box := m.boxes[id]
		if box == nil {
			return fmt.Errorf("relay holds %d after its stream ended", id)
		}
		if r.link == nil && !e.running && !e.told {
			return fmt.Errorf("%d waits for a scheduler without being told it is queued", id)
		}
	}
	for id, box := range m.boxes {
		queued, decided := 0, 0
		for _, k := range box.got {
			switch k {
			case noticeQueued:
				queued++
			case noticeDecided:
				decided++
			case noticePreempted:
			}
		}
		if queued > 1 || decided > 1 {
			return fmt.Errorf("stream %d told %v", id, box.got)
		}
		if _, held := r.reqs[id]; !held && decided == 0 {
			return fmt.Errorf("relay forgot %d, which nobody rejected", id)
		}
	}
	// What the current link was told after its burst names only requests
	// it was given, and every release follows that request's submit.
	if l := r.link; l != nil {
		given := map[uint64]bool{}
		for _, u := range sent(l) {
			switch u.Kind {
			case peer.UpSubmit, peer.UpAdopt:
				given[u.ID] = true
			case peer.UpRelease, peer.UpFirstToken, peer.UpServed, peer.UpUsage:
				if !given[u.ID] {
					return fmt.Errorf("link %d told of %d (%v) before it had it", l.gen, u.ID, u.Kind)
				}
			case peer.UpHello, peer.UpSynced:
			}
		}
	}
	return nil
}

func TestRelay_RandomSequences(t *testing.T) {
	for seed := range uint64(200) {
		m := newRelayModel(t, seed)
		for i := range 300 {
			if err := m.step(); err != nil {
				t.Fatalf("seed %d, step %d: %v", seed, i, err)
			}
		}
	}
}

func FuzzRelay(f *testing.F) {
	f.Add(uint64(1), uint16(100))
	f.Fuzz(func(t *testing.T, seed uint64, steps uint16) {
		m := newRelayModel(t, seed)
		for i := range int(steps % 2000) {
			if err := m.step(); err != nil {
				t.Fatalf("step %d: %v", i, err)
			}
		}
	})
}
