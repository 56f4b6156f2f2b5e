package enginemetrics

import (
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/tollgate/tollgate/sched"
	"github.com/tollgate/tollgate/test/mockworker"
)

func TestParse_VLLMNamesPerRank(t *testing.T) {
	in := `# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 3
vllm:num_requests_waiting{engine="1",model_name="m"} 0
vllm:num_requests_waiting{engine="1",model_name="lora-a"} 2
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 7
vllm:num_requests_running{engine="1",model_name="m"} 1
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{engine="0",model_name="m"} 0.5
vllm:gpu_cache_usage_perc{engine="1",model_name="m"} 1.5
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",num_gpu_blocks="2048"} 1
# TYPE vllm:lora_requests_info gauge
vllm:lora_requests_info{engine="0",max_lora="4",running_lora_adapters="a,b",waiting_lora_adapters=""} 1.7e9
vllm:lora_requests_info{engine="0",max_lora="4",running_lora_adapters="a",waiting_lora_adapters="c"} 1.6e9
`
	rep, err := Parse(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if rep.Engine != "vllm" || len(rep.Loads) != 3 {
		t.Fatalf("engine %q loads %d, want vllm 3", rep.Engine, len(rep.Loads))
	}
	r0, r1 := rep.Loads[0], rep.Loads[1]
	if r0.Waiting != 3 || r0.Running != 7 || r0.KVUsage != 0.5 || r1.Waiting != 2 || r1.KVUsage != 1 {
		t.Fatalf("ranks %+v %+v", r0, r1)
	}
	if diff := cmp.Diff([]string{"a", "b"}, r0.LoRA.Running); diff != "" || r0.LoRA.MaxLoRA != 4 {
		t.Fatalf("lora %+v (newest series wins)", r0.LoRA)
	}
	st := newScrapeStats()
	st.observe("w", Result{Report: rep})
	if l := st.workers["w"].lora; l == nil || l.running != 2 || l.waiting != 0 || l.max != 4 {
		t.Fatalf("lora counts %+v", l)
	}
	got := Target{Worker: "w", DPStart: 4, DPSize: 2}.Loads(rep, time.Unix(0, 0))
	want := []sched.EngineLoad{
		{Worker: "w", Rank: 4, At: time.Unix(0, 0), Waiting: 3, Running: 7, KVUsage: 0.5, KVBlocks: 2048},
		{Worker: "w", Rank: 5, At: time.Unix(0, 0), Waiting: 2, Running: 1, KVUsage: 1, KVBlocks: 2048},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("loads (-want +got):\n%s", diff)
	}
}

func TestParse_SGLangUnlabelledSplitsOverRanks(t *testing.T) {
	in := `sglang:num_queue_reqs{model_name="m"} 5
sglang:num_running_reqs{model_name="m"} 8
sglang:token_usage{model_name="m"} 0.25
sglang:max_running_requests{model_name="m"} 64
sglang:cache_config_info{page_size="32",num_pages="100"} 1
`
	rep, err := Parse(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	got := Target{Worker: "w", DPSize: 2}.Loads(rep, time.Unix(0, 0))
	want := []sched.EngineLoad{
		{Worker: "w", Rank: 0, At: time.Unix(0, 0), Waiting: 3, Running: 4, KVUsage: 0.25, KVBlocks: 50, MaxRunning: 32},
		{Worker: "w", Rank: 1, At: time.Unix(0, 0), Waiting: 3, Running: 4, KVUsage: 0.25, KVBlocks: 50, MaxRunning: 32},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("loads (-want +got):\n%s", diff)
	}
}

func TestParse_Rejects(t *testing.T) {
	for _, in := range []string{"garbage{{{ 1\n", "# TYPE x gauge\nx 1\n", "\x00\x01\x02"} {
		if _, err := Parse(strings.NewReader(in)); err == nil {
			t.Errorf("Parse(%q) accepted", in)
		}
	}
}

// TestParse_MockworkerIsTruthful reads a two-rank mockworker engine in both
// namings and finds its simulated state.
func TestParse_MockworkerIsTruthful(t *testing.T) {
	for _, naming := range []string{"vllm", "sglang"} {
		t.Run(naming, func(t *testing.T) {
			var ws []*mockworker.Worker
			for rank := range 2 {
				w, err := mockworker.New(mockworker.Config{ID: "r", MetricsNaming: naming, DPRank: rank, MaxNumSeqs: 3, CacheBlocks: 100})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = w.Close() })
				ws = append(ws, w)
			}
			rec := httptest.NewRecorder()
			mockworker.MetricsHandler(ws...).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
			rep, err := Parse(rec.Body)
			if err != nil {
				t.Fatal(err)
			}
			got := Target{Worker: "w", DPSize: 2}.Loads(rep, time.Unix(0, 0))
			if len(got) != 2 || got[0].Rank != 0 || got[1].Rank != 1 {
				t.Fatalf("loads %+v, want ranks 0 and 1", got)
			}
			if got[0].KVBlocks != 100 {
				t.Errorf("kv blocks %d, want 100", got[0].KVBlocks)
			}
			if naming == "sglang" && got[0].MaxRunning != 3 {
				t.Errorf("max running %d, want 3", got[0].MaxRunning)
			}
		})
	}
}
