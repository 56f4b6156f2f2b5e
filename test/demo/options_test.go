package demo

import (
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestOptions_Invalid(t *testing.T) {
	tests := []struct {
		name string
		give Options
		want string
	}{
		{"no writer", Options{}, "no output writer"},
		{"scenario", Options{Stdout: io.Discard, Scenario: "fast"}, `unknown scenario "fast"`},
		{"negative speed", Options{Stdout: io.Discard, Speed: -1}, "speed must be a positive number"},
		{"nan speed", Options{Stdout: io.Discard, Speed: math.NaN()}, "speed must be a positive number"},
		{"too fast", Options{Stdout: io.Discard, Speed: 50}, "speed 50 is above 20"},
		{"missing examples", Options{Stdout: io.Discard, Examples: t.TempDir()}, "equal_share.yaml"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tt.give.withDefaults()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("withDefaults() error = %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func TestOptions_Defaults(t *testing.T) {
	o, err := Options{Stdout: io.Discard}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if o.Out != DefaultOut || o.Scenario != ScenarioAll || o.Speed != 1 || o.Seed != 1 {
		t.Errorf("defaults: %+v", o)
	}
	// Found from this package's directory by walking up to the repository.
	if want := examplesDir(t); o.Examples != want {
		t.Errorf("examples directory %q, want %q", o.Examples, want)
	}
	if _, err := os.Stat(filepath.Join(o.Examples, filePriority)); err != nil {
		t.Error(err)
	}
}

func TestRun_RejectsBadOptionsBeforeStarting(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "out")
	err := Run(t.Context(), Options{Stdout: io.Discard, Out: dir, Scenario: "nope"})
	if err == nil || !strings.Contains(err.Error(), "unknown scenario") {
		t.Fatalf("Run error = %v, want the scenario error", err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("Run created %s before validating its options", dir)
	}
}
