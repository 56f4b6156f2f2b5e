package main

import (
	"errors"
	"flag"
	"fmt"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/tollgate/tollgate/extproc"
	"github.com/tollgate/tollgate/extproc/intake"
	"github.com/tollgate/tollgate/sched"
)

// pickerOptions holds the flags of the endpoint picker protocol of the
// Gateway API Inference Extension.
type pickerOptions struct {
	assumeRequestBodyMode  string
	assumeResponseBodyMode string
	classLimitStatus       int
	fallbackEndpoints      int
	testEndpointSelection  bool
	modelRewrites          stringList
}

func registerPickerFlags(fs *flag.FlagSet, o *pickerOptions) {
	fs.StringVar(&o.assumeRequestBodyMode, "assume-request-body-mode", "BUFFERED",
		"request body mode assumed when Envoy sends no protocol_config (before 1.34): NONE, STREAMED, BUFFERED, BUFFERED_PARTIAL or FULL_DUPLEX_STREAMED")
	fs.StringVar(&o.assumeResponseBodyMode, "assume-response-body-mode", "STREAMED",
		"response body mode assumed when Envoy sends no protocol_config (before 1.34), same values")
	fs.IntVar(&o.fallbackEndpoints, "fallback-endpoints", 0,
		"next-best workers named after the chosen one in x-gateway-destination-endpoint, for the data plane to retry on (0 to 8)")
	fs.BoolVar(&o.testEndpointSelection, "test-endpoint-selection", false,
		"TESTING ONLY: honour the conformance suite's test-epp-endpoint-selection header, which lets a client choose its worker")
	fs.Var(&o.modelRewrites, "model-rewrite", "serve requests for model FROM as model TO, rewriting the request body: FROM=TO, or FROM=TO*WEIGHT,TO*WEIGHT,... to split by weight (repeatable); with --discovery inferencepool the pool's InferenceModelRewrite objects add rules, and this flag wins for the names it sets")
	fs.IntVar(&o.classLimitStatus, "class-limit-status", extproc.DefaultClassLimitStatus,
		"HTTP status of a Dynamo per-worker queue limit: 529 (Dynamo's Overloaded) or 429 (the endpoint picker protocol's shed answer)")
}

// apply resolves the flags into cfg.
func (o *pickerOptions) apply(cfg *extproc.Config) error {
	var errs []error
	req, err := extproc.ParseBodyMode(o.assumeRequestBodyMode)
	if err != nil {
		errs = append(errs, fmt.Errorf("--assume-request-body-mode: %w", err))
	}
	resp, err := extproc.ParseBodyMode(o.assumeResponseBodyMode)
	if err != nil {
		errs = append(errs, fmt.Errorf("--assume-response-body-mode: %w", err))
	}
	cfg.AssumedProtocol = &extprocv3.ProtocolConfiguration{RequestBodyMode: req, ResponseBodyMode: resp}
	if o.classLimitStatus != 429 && o.classLimitStatus != 529 {
		errs = append(errs, fmt.Errorf("--class-limit-status must be 529 or 429, got %d", o.classLimitStatus))
	}
	cfg.ClassLimitStatus = o.classLimitStatus
	if o.fallbackEndpoints < 0 || o.fallbackEndpoints > sched.MaxFallbacks {
		errs = append(errs, fmt.Errorf("--fallback-endpoints must be between 0 and %d, got %d", sched.MaxFallbacks, o.fallbackEndpoints))
	}
	cfg.Sched.Fallbacks = o.fallbackEndpoints
	cfg.TestEndpointSelection = o.testEndpointSelection
	for _, s := range o.modelRewrites {
		from, targets, err := intake.ParseModelRewrite(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("--model-rewrite: %w", err))
			continue
		}
		if cfg.ModelRewrites == nil {
			cfg.ModelRewrites = map[string][]intake.RewriteTarget{}
		}
		if _, dup := cfg.ModelRewrites[from]; dup {
			errs = append(errs, fmt.Errorf("--model-rewrite: model %q is rewritten twice", from))
		}
		cfg.ModelRewrites[from] = targets
	}
	return errors.Join(errs...)
}
