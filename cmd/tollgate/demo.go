package main

import (
	"context"
	"errors"
	"io"
)

// runDemo runs the self-contained demonstration.
func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return errors.New("demo: not built yet")
}
