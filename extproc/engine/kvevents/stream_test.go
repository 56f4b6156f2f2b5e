package kvevents

import "testing"

func TestTracker(t *testing.T) {
	var tr tracker
	steps := []struct {
		seq   uint64
		want  verdict
		apply bool
	}{
		{5, vGap, false},  // joined mid-stream
		{0, vApply, true}, // from the start
		{1, vApply, true},
		{1, vDuplicate, false},
		{4, vGap, false},
		{2, vApply, true},
		{3, vApply, true},
		{4, vApply, true},
		{0, vRestart, false},
	}
	for i, s := range steps {
		if got := tr.check(s.seq); got != s.want {
			t.Fatalf("step %d: check(%d) = %d, want %d", i, s.seq, got, s.want)
		}
		if s.apply {
			tr.applied(s.seq)
		}
	}
	// After a replay that ran ahead of the live stream, the live batches it
	// already applied are duplicates, not a restart.
	tr = tracker{}
	tr.applied(0)
	tr.applied(10) // replayed through 10
	tr.floor = 6   // the live batch that revealed the gap
	for seq := uint64(6); seq <= 10; seq++ {
		if got := tr.check(seq); got != vDuplicate {
			t.Errorf("live %d after replay: %d, want duplicate", seq, got)
		}
	}
	if tr.check(11) != vApply || tr.check(5) != vRestart {
		t.Error("after replay: 11 must apply and 5 is a restart")
	}
}

func TestParseTopicAndPorts(t *testing.T) {
	if pod, model, ok := parseTopic([]byte("kv@pod-1@meta/llama@v2")); !ok || pod != "pod-1" || model != "meta/llama@v2" {
		t.Errorf("parseTopic = %q %q %v", pod, model, ok)
	}
	if _, _, ok := parseTopic([]byte("vllm")); ok {
		t.Error("a topic without kv@ parsed")
	}
	if got := OffsetPort("tcp://10.0.0.1:5557", 3); got != "tcp://10.0.0.1:5560" {
		t.Errorf("OffsetPort = %s", got)
	}
	if got := OffsetPort("tcp://[::1]:5557", 1); got != "tcp://[::1]:5558" {
		t.Errorf("OffsetPort v6 = %s", got)
	}
	for _, bad := range []string{"", "10.0.0.1:5557", "tcp://10.0.0.1", "tcp://:5557", "tcp://h:99999", "udp://x:1"} {
		if CheckEndpoint(bad) == nil {
			t.Errorf("CheckEndpoint(%q) accepted", bad)
		}
	}
	if err := CheckEndpoint("tcp://10.0.0.1:5557"); err != nil {
		t.Error(err)
	}
}
