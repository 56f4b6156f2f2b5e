package tokenize

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no helper (encode.go's pipeline) outlives its call.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
