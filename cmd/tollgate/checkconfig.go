package main

import (
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/tollgate/tollgate/extproc"
	"github.com/tollgate/tollgate/sched/policy"
)

// runCheckConfig validates every file and flag the serving command would
// use, builds the scheduler over the initial worker set (which checks the
// SMG reservations against its capacity), and prints every problem.
func runCheckConfig(args []string, stdout, stderr io.Writer) error {
	var o options
	fs := newFlagSet("check-config", &o)
	if err := parseFlags(fs, "check-config", args, stdout, stderr); err != nil {
		return err
	}
	problems, warnings, notes := checkConfig(&o)
	for _, n := range notes {
		fmt.Fprintln(stdout, n)
	}
	for _, w := range warnings {
		fmt.Fprintf(stdout, "warning: %s\n", w)
	}
	if len(problems) == 0 {
		fmt.Fprintln(stdout, "configuration ok")
		return nil
	}
	for _, p := range problems {
		fmt.Fprintf(stdout, "problem: %s\n", p)
	}
	return fmt.Errorf("%d problem(s) found", len(problems))
}

// checkConfig returns every problem with o, one message each, and the
// warnings of a valid configuration and notes on what it read.
func checkConfig(o *options) (problems, warnings, notes []string) {
	st, err := o.build(slog.New(slog.DiscardHandler))
	if err == nil {
		warnings = st.warnings
		if o.routerPolicyConfig != "" {
			notes = append(notes, routerPolicyNote(o.routerPolicyConfig, st.cfg.Sched.Policy.Schema))
		}
		_, err = extproc.New(st.cfg, st.workers)
		err = o.explainReservations(err)
	}
	return splitJoined(err), warnings, notes
}

// routerPolicyNote says which generation the router policy file at path
// was read as, with the key that tells it.
func routerPolicyNote(path, schema string) string {
	key := "default_policy_family"
	if schema == policy.SchemaFlat {
		key = "default_policy_class"
	}
	return fmt.Sprintf("router policy config %s: %s classes (%s)", path, schema, key)
}

// splitJoined flattens an errors.Join tree into one line per leaf error.
func splitJoined(err error) []string {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []string
		for _, e := range j.Unwrap() {
			out = append(out, splitJoined(e)...)
		}
		return out
	}
	var msgs []string
	for line := range strings.SplitSeq(err.Error(), "\n") {
		if line = strings.TrimSpace(line); line != "" {
			msgs = append(msgs, line)
		}
	}
	return msgs
}
