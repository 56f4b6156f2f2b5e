package enginemetrics

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if a goroutine outlives them: every
// Scraper's loops end with its Run.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
