package main

import (
	"strings"
	"testing"
	"time"
)

func TestCheckConfig_EngineFlags(t *testing.T) {
	code, out, _ := runArgs(t, "check-config",
		"--engine-metrics-interval", "10ms",
		"--engine-metrics-timeout", "0s",
		"--engine-metrics-max-inflight", "0",
		"--engine-metrics-staleness", "-1s",
		"--engine-saturation-kv", "1.5",
	)
	if code != 1 {
		t.Fatalf("code %d, want 1; output:\n%s", code, out)
	}
	for _, want := range []string{
		"--engine-metrics-interval 10ms is below 50ms",
		"--engine-metrics-timeout must be positive",
		"--engine-metrics-max-inflight must be in [1, 4096]",
		"--engine-metrics-staleness must be positive",
		"--engine-saturation-kv must be in [0, 1]",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestEngineOptions_Configs(t *testing.T) {
	var o options
	fs := newFlagSet("serve", &o)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	sc, ec, err := o.engine.configs()
	if err != nil || sc == nil {
		t.Fatalf("defaults: %v %v", sc, err)
	}
	if sc.Interval != 500*time.Millisecond || ec.MaxAge != 2*time.Second || ec.WaitingThreshold != 5 || ec.KVThreshold != 0.8 ||
		!ec.Saturation || !ec.WarmStart || !ec.Capacity || ec.WarmWait != 1400*time.Millisecond {
		t.Errorf("defaults: scraper %+v, sched %+v", sc, ec)
	}
	if err := fs.Parse([]string{"--engine-metrics-interval=0"}); err != nil {
		t.Fatal(err)
	}
	sc, ec, err = o.engine.configs()
	if err != nil || sc != nil || ec.MaxAge != 0 {
		t.Errorf("interval 0: scraper %v, sched %+v, %v; want scraping and every use off", sc, ec, err)
	}
}
