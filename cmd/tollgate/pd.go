package main

import (
	"flag"

	"github.com/tollgate/tollgate/sched"
)

// registerPDFlags registers the prefill/decode disaggregation flags.
func registerPDFlags(fs *flag.FlagSet, threshold *uint64) {
	fs.Uint64Var(threshold, "pd-uncached-threshold", sched.DefaultPDThreshold,
		"uncached prompt tokens on the chosen decode worker at which a request is split: its prefill runs on a prefill-role worker named in x-prefiller-host-port (only when the fleet has prefill-role workers)")
}
