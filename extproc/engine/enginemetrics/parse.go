package enginemetrics

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Metric names read from the engines.
const (
	vllmWaiting       = "vllm:num_requests_waiting"
	vllmRunning       = "vllm:num_requests_running"
	vllmKVUsage       = "vllm:kv_cache_usage_perc"
	vllmGPUCacheUsage = "vllm:gpu_cache_usage_perc" // before vLLM replaced it with vllm:kv_cache_usage_perc
	vllmCacheConfig   = "vllm:cache_config_info"
	vllmLoRA          = "vllm:lora_requests_info"
	sglangWaiting     = "sglang:num_queue_reqs"
	sglangRunning     = "sglang:num_running_reqs"
	sglangTokenUsage  = "sglang:token_usage"
	sglangCacheConfig = "sglang:cache_config_info"
	sglangMaxRunning  = "sglang:max_running_requests"
)

// rankLabels name the DP rank of a series, in order of preference.
var rankLabels = []string{"engine", "dp_rank", "data_parallel_rank"}

// Load is what one engine rank reported.
type Load struct {
	// Rank is the DP rank label's value; Labelled is false when the
	// series carried none.
	Rank     uint32
	Labelled bool
	// Models lists the model_name labels seen on the rank.
	Models           []string
	Waiting, Running float64
	// KVUsage is the used KV fraction (0..1); HasKV is set when reported.
	KVUsage float64
	HasKV   bool
	// KVBlocks and BlockSize come from cache_config_info (0 when absent).
	KVBlocks, BlockSize uint64
	// MaxRunning is the running-request limit (SGLang; 0 when absent).
	MaxRunning uint64
	// LoRA is the rank's LoRA state, nil when not reported.
	LoRA *LoRA
}

// LoRA is vLLM's lora_requests_info: the adapters running and waiting and
// the adapter limit, from the series with the newest timestamp value.
type LoRA struct {
	Running, Waiting []string
	MaxLoRA          uint64
	stamp            float64
}

// Report is one parsed exposition: the loads, labelled ranks first in rank
// order, then the unlabelled one if any.
type Report struct {
	Loads []Load
	// Engine is "vllm", "sglang" or "" when neither family was found.
	Engine string
}

// ErrNoEngineMetrics is returned for an exposition without a single known
// load series: the URL is not an engine's metrics endpoint.
var ErrNoEngineMetrics = fmt.Errorf("enginemetrics: no vllm or sglang load series")

// known lists the families Parse reads.
var known = map[string]bool{
	vllmWaiting: true, vllmRunning: true, vllmKVUsage: true, vllmGPUCacheUsage: true, vllmCacheConfig: true, vllmLoRA: true,
	sglangWaiting: true, sglangRunning: true, sglangTokenUsage: true, sglangCacheConfig: true, sglangMaxRunning: true,
}

// Parse reads a Prometheus text exposition.
func Parse(r io.Reader) (Report, error) {
	b, err := io.ReadAll(r)
	if err != nil {
		return Report{}, fmt.Errorf("enginemetrics: %w", err)
	}
	return ParseBytes(b)
}

// ParseBytes parses an exposition held in memory. Only the lines of the
// families it reads reach the Prometheus parser: an engine's histograms,
// most of its body, are skipped by a scan for line starts.
func ParseBytes(data []byte) (Report, error) {
	var kept bytes.Buffer
	for len(data) > 0 {
		line := data
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i+1], data[i+1:]
		} else {
			data = nil
		}
		if wanted(line) {
			kept.Write(line)
			if line[len(line)-1] != '\n' {
				kept.WriteByte('\n')
			}
		}
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(&kept)
	if err != nil {
		return Report{}, fmt.Errorf("enginemetrics: %w", err)
	}
	b := builder{byRank: map[uint32]*Load{}}
	engine := ""
	gauge := func(name string, set func(l *Load, v float64)) bool {
		f := fams[name]
		if f == nil {
			return false
		}
		for _, m := range f.GetMetric() {
			v := value(m)
			if math.IsNaN(v) || math.IsInf(v, 0) {
				continue
			}
			set(b.load(m), v)
		}
		return true
	}
	if gauge(vllmWaiting, func(l *Load, v float64) { l.Waiting += max(v, 0) }) {
		engine = "vllm"
	}
	if gauge(vllmRunning, func(l *Load, v float64) { l.Running += max(v, 0) }) {
		engine = "vllm"
	}
	kv := func(l *Load, v float64) { l.KVUsage, l.HasKV = max(l.KVUsage, min(max(v, 0), 1)), true }
	if !gauge(vllmKVUsage, kv) {
		gauge(vllmGPUCacheUsage, kv)
	}
	if gauge(sglangWaiting, func(l *Load, v float64) { l.Waiting += max(v, 0) }) {
		engine = "sglang"
	}
	if gauge(sglangRunning, func(l *Load, v float64) { l.Running += max(v, 0) }) {
		engine = "sglang"
	}
	gauge(sglangTokenUsage, kv)
	gauge(sglangMaxRunning, func(l *Load, v float64) { l.MaxRunning = max(l.MaxRunning, clampU64(v)) })
	info := func(name, blocks, size string) {
		gauge(name, func(l *Load, _ float64) {
			m := b.cur
			l.KVBlocks = max(l.KVBlocks, labelU64(m, blocks))
			l.BlockSize = max(l.BlockSize, labelU64(m, size))
		})
	}
	info(vllmCacheConfig, "num_gpu_blocks", "block_size")
	info(sglangCacheConfig, "num_pages", "page_size")
	gauge(vllmLoRA, func(l *Load, v float64) {
		if l.LoRA != nil && v < l.LoRA.stamp {
			return
		}
		m := b.cur
		l.LoRA = &LoRA{
			Running: splitList(label(m, "running_lora_adapters")),
			Waiting: splitList(label(m, "waiting_lora_adapters")),
			MaxLoRA: labelU64(m, "max_lora"),
			stamp:   v,
		}
	})
	if engine == "" {
		return Report{}, ErrNoEngineMetrics
	}
	return Report{Loads: b.loads(), Engine: engine}, nil
}

// wanted reports whether an exposition line belongs to a known family: a
// sample whose name is known, or its # HELP or # TYPE comment. Other
// comments and blank lines are dropped too. A line the parser would reject
// is kept when it starts like a known name, so a broken body still fails.
func wanted(line []byte) bool {
	if rest, ok := bytes.CutPrefix(line, []byte("# HELP ")); ok {
		line = rest
	} else if rest, ok := bytes.CutPrefix(line, []byte("# TYPE ")); ok {
		line = rest
	} else if len(line) > 0 && line[0] == '#' {
		return false
	}
	end := bytes.IndexAny(line, "{ \t\n")
	if end < 0 {
		end = len(line)
	}
	return known[string(line[:end])]
}

// builder collects loads by rank.
type builder struct {
	byRank     map[uint32]*Load
	unlabelled *Load
	cur        *dto.Metric
}

// load returns the load of m's rank, creating it, and notes m's model.
func (b *builder) load(m *dto.Metric) *Load {
	b.cur = m
	var l *Load
	if rank, ok := rankOf(m); ok {
		l = b.byRank[rank]
		if l == nil {
			l = &Load{Rank: rank, Labelled: true}
			b.byRank[rank] = l
		}
	} else {
		if b.unlabelled == nil {
			b.unlabelled = &Load{}
		}
		l = b.unlabelled
	}
	if mn := label(m, "model_name"); mn != "" && !contains(l.Models, mn) && len(l.Models) < maxModels {
		l.Models = append(l.Models, mn)
	}
	return l
}

// maxModels bounds the model names kept per rank.
const maxModels = 16

// loads returns the collected loads, labelled ranks in rank order first.
func (b *builder) loads() []Load {
	out := make([]Load, 0, len(b.byRank)+1)
	for _, l := range b.byRank {
		out = append(out, *l)
	}
	sortLoads(out)
	if b.unlabelled != nil {
		out = append(out, *b.unlabelled)
	}
	return out
}

func sortLoads(ls []Load) {
	for i := 1; i < len(ls); i++ {
		for j := i; j > 0 && ls[j].Rank < ls[j-1].Rank; j-- {
			ls[j], ls[j-1] = ls[j-1], ls[j]
		}
	}
}

// rankOf reads m's DP rank label.
func rankOf(m *dto.Metric) (uint32, bool) {
	for _, name := range rankLabels {
		if v := label(m, name); v != "" {
			if n, err := strconv.ParseUint(v, 10, 32); err == nil {
				return uint32(n), true
			}
		}
	}
	return 0, false
}

func label(m *dto.Metric, name string) string {
	for _, lp := range m.GetLabel() {
		if lp.GetName() == name {
			return lp.GetValue()
		}
	}
	return ""
}

func labelU64(m *dto.Metric, name string) uint64 {
	v := label(m, name)
	if v == "" {
		return 0
	}
	if n, err := strconv.ParseUint(v, 10, 64); err == nil {
		return n
	}
	if f, err := strconv.ParseFloat(v, 64); err == nil {
		return clampU64(f)
	}
	return 0
}

// value is a gauge's, counter's or untyped sample's value.
func value(m *dto.Metric) float64 {
	switch {
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	case m.Untyped != nil:
		return m.GetUntyped().GetValue()
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	}
	return math.NaN()
}

func clampU64(v float64) uint64 {
	switch {
	case !(v > 0):
		return 0
	case v >= math.MaxUint32:
		return math.MaxUint32
	}
	return uint64(v)
}

func splitList(s string) []string {
	var out []string
	for p := range strings.SplitSeq(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}
