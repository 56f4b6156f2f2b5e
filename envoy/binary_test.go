package envoy_test

import (
	"context"
	"os/exec"
	"testing"
	"time"
)

// TestEnvoyValidatesBootstraps runs Envoy's own config validation on each
// bootstrap. No Envoy binary comes from the package registries this
// project uses, so it runs only where one is on PATH.
func TestEnvoyValidatesBootstraps(t *testing.T) {
	bin, err := exec.LookPath("envoy")
	if err != nil {
		t.Skip("no envoy binary on PATH")
	}
	for _, name := range bootstraps {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			out, err := exec.CommandContext(ctx, bin, "--mode", "validate", "-c", name).CombinedOutput()
			if err != nil {
				t.Fatalf("envoy --mode validate -c %s: %v\n%s", name, err, out)
			}
		})
	}
}
