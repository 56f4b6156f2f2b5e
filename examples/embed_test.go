package examples

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// TestFS_MatchesTheDirectory checks that FS holds every top-level *.yaml
// file of this directory, byte for byte, and nothing else.
func TestFS_MatchesTheDirectory(t *testing.T) {
	onDisk, err := filepath.Glob("*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	embedded, err := fs.Glob(FS(), "*")
	if err != nil {
		t.Fatal(err)
	}
	if len(onDisk) == 0 || len(embedded) != len(onDisk) {
		t.Fatalf("embedded %q, on disk %q", embedded, onDisk)
	}
	for _, name := range onDisk {
		want, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		got, err := fs.ReadFile(FS(), name)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s: the embedded copy differs from the file", name)
		}
	}
}
