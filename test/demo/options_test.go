package demo

import (
	"bytes"
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
	if o.Out != DefaultOut || o.Scenario != ScenarioAll || o.Speed != 1 || o.Seed != 1 || o.Examples != "" {
		t.Errorf("defaults: %+v", o)
	}
}

// TestOptions_BuiltinExamples checks that without --examples the scenarios
// read a temporary copy of the repository's example files, removed after.
func TestOptions_BuiltinExamples(t *testing.T) {
	o := Options{Stdout: io.Discard}
	shown, cleanup, err := o.useExamples()
	if err != nil {
		t.Fatal(err)
	}
	if shown != "examples" || o.Examples == "" {
		t.Fatalf("shown %q, directory %q", shown, o.Examples)
	}
	for _, f := range exampleFiles {
		got, err := os.ReadFile(filepath.Join(o.Examples, f))
		if err != nil {
			t.Fatal(err)
		}
		want, err := os.ReadFile(filepath.Join(examplesDir(t), f))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s: the copy differs from examples/%s", f, f)
		}
	}
	cleanup()
	if _, err := os.Stat(o.Examples); !os.IsNotExist(err) {
		t.Errorf("cleanup left %s: %v", o.Examples, err)
	}
}

func TestOptions_GivenExamples(t *testing.T) {
	o := Options{Stdout: io.Discard, Examples: examplesDir(t)}
	shown, cleanup, err := o.useExamples()
	if err != nil {
		t.Fatal(err)
	}
	cleanup()
	if shown != examplesDir(t) || o.Examples != examplesDir(t) {
		t.Errorf("shown %q, directory %q; want the given %q", shown, o.Examples, examplesDir(t))
	}
	if _, err := os.Stat(filepath.Join(o.Examples, filePriority)); err != nil {
		t.Errorf("cleanup touched the given directory: %v", err)
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
