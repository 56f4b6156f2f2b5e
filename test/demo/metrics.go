package demo

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// scrape is one parsed /metrics response.
type scrape map[string]*dto.MetricFamily

// scrapeMetrics fetches and parses http://addr/metrics, as Prometheus
// would.
func scrapeMetrics(ctx context.Context, addr string) (scrape, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return nil, fmt.Errorf("demo: metrics request: %w", err)
	}
	// A transport of its own, closed after the scrape, so no keep-alive
	// connection outlives the stack.
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return nil, fmt.Errorf("demo: scraping /metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("demo: scraping /metrics: status %d", resp.StatusCode)
	}
	return parseMetrics(resp.Body)
}

// scrapeHandler reads /metrics from h (Server.MetricsHandler) in-process:
// the same text a scrape over HTTP gets.
func scrapeHandler(h http.Handler) (scrape, error) {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if w.Code != http.StatusOK {
		return nil, fmt.Errorf("demo: scraping /metrics: status %d", w.Code)
	}
	return parseMetrics(w.Body)
}

// parseMetrics parses the Prometheus text format, as Prometheus would.
func parseMetrics(r io.Reader) (scrape, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("demo: parsing /metrics: %w", err)
	}
	return fams, nil
}

// matching returns the series of family name whose labels include every
// pair in labels.
func (s scrape) matching(name string, labels map[string]string) []*dto.Metric {
	f := s[name]
	if f == nil {
		return nil
	}
	var out []*dto.Metric
	for _, m := range f.GetMetric() {
		n := 0
		for _, lp := range m.GetLabel() {
			if v, ok := labels[lp.GetName()]; ok && v == lp.GetValue() {
				n++
			}
		}
		if n == len(labels) {
			out = append(out, m)
		}
	}
	return out
}

// value sums the counter or gauge values of the matching series.
func (s scrape) value(name string, labels map[string]string) float64 {
	total := 0.0
	for _, m := range s.matching(name, labels) {
		switch {
		case m.GetCounter() != nil:
			total += m.GetCounter().GetValue()
		case m.GetGauge() != nil:
			total += m.GetGauge().GetValue()
		case m.GetUntyped() != nil:
			total += m.GetUntyped().GetValue()
		}
	}
	return total
}

// histogram sums the sample counts and sums of the matching histograms.
func (s scrape) histogram(name string, labels map[string]string) (count uint64, sum float64) {
	for _, m := range s.matching(name, labels) {
		if h := m.GetHistogram(); h != nil {
			count += h.GetSampleCount()
			sum += h.GetSampleSum()
		}
	}
	return count, sum
}
