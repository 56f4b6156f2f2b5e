package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"

	"github.com/tollgate/tollgate/test/promserver"
)

const (
	dashboardFile = "../../charts/tollgate/dashboards/tollgate.json"
	rulesFile     = "../../charts/tollgate/rules/tollgate.rules.yaml"
)

// panelQuery is one target of the shipped Grafana dashboard.
type panelQuery struct {
	panel, expr, legend string
}

func dashboardQueries(t *testing.T) []panelQuery {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr         string `json:"expr"`
				LegendFormat string `json:"legendFormat"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatal(err)
	}
	var qs []panelQuery
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			qs = append(qs, panelQuery{p.Title, tg.Expr, tg.LegendFormat})
		}
	}
	if len(qs) == 0 {
		t.Fatal("the dashboard has no queries")
	}
	return qs
}

var (
	byClause    = regexp.MustCompile(`\bby\s*\(([^)]*)\)`)
	legendLabel = regexp.MustCompile(`\{\{\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}`)
)

// panelLabels are the labels a panel needs on every series: those it
// groups by (le aside, histogram_quantile consumes it) and those its legend
// prints.
func panelLabels(q panelQuery) []string {
	var ls []string
	for _, m := range byClause.FindAllStringSubmatch(q.expr, -1) {
		for l := range strings.SplitSeq(m[1], ",") {
			if l = strings.TrimSpace(l); l != "" && l != "le" {
				ls = append(ls, l)
			}
		}
	}
	for _, m := range legendLabel.FindAllStringSubmatch(q.legend, -1) {
		ls = append(ls, m[1])
	}
	slices.Sort(ls)
	return slices.Compact(ls)
}

// TestPrometheus_Dashboard runs the demo stack under a burst of mixed
// traffic with a real Prometheus scraping tollgate, then checks that every
// query of the shipped dashboard parses and returns series with the labels
// its panel uses, that the recording rules produce series and every rule
// evaluates without error, and that promtool finds nothing to fix in the
// exposition.
func TestPrometheus_Dashboard(t *testing.T) {
	promserver.Promtool(t) // fail or skip before starting anything
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	type addrs struct{ front, metrics string }
	ready := make(chan addrs, 1)
	done := make(chan error, 1)
	go func() {
		done <- Serve(ctx, Options{
			Stdout: io.Discard, Stderr: t.Output(), Serve: "127.0.0.1:0", Speed: 2,
			serveReady: func(front, metrics string) { ready <- addrs{front, metrics} },
		})
	}()
	var a addrs
	select {
	case a = <-ready:
	case err := <-done:
		t.Fatalf("Serve returned early: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("Serve did not come up")
	}
	defer func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Serve: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("Serve did not stop")
		}
	}()

	prom := promserver.Start(t, promserver.Config{Targets: []string{a.metrics}, RuleFiles: []string{rulesFile}})

	// Two waves: bulk jobs beyond the slots bulk may hold (so they queue),
	// interactive and clamped traffic beside them.
	tr := &http.Transport{MaxIdleConnsPerHost: 300}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 60 * time.Second}
	post := func(key, priority, class string, maxTokens int) error {
		body := fmt.Sprintf(`{"model":%q,"prompt":"Summarise the quarterly report in one line.","max_tokens":%d}`, demoModel, maxTokens)
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+a.front+"/v1/completions", strings.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("X-Smg-Priority", priority)
		req.Header.Set("X-Dynamo-Meta-Policy-Class", class)
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s/%s: status %d", priority, class, resp.StatusCode)
		}
		return nil
	}
	waitFor(t, 30*time.Second, "Prometheus to scrape tollgate", func() bool {
		v, err := instant(ctx, prom.API, `up{job="tollgate"} == 1`)
		return err == nil && len(v) == 1
	})
	// auth:trial's budget is two requests a minute: the third is denied,
	// which the tenant budget panels show. Before the waves, so that the
	// denial counter has the scrapes a rate needs by the end.
	for i, want := range []int{http.StatusOK, http.StatusOK, http.StatusTooManyRequests} {
		if err := post("demo-trial-key", "default", "regular", 4); (err == nil) != (want == http.StatusOK) {
			t.Fatalf("trial request %d: %v, want status %d", i, err, want)
		}
	}
	// Series appear with the first wave; the second, three scrapes later,
	// gives the rates something to measure.
	const bulkPerWave = 180
	for wave := range 2 {
		if wave > 0 {
			awaitScrapes(ctx, t, prom.API, 3)
		}
		var wg sync.WaitGroup
		errs := make(chan error, bulkPerWave+40)
		for i := range bulkPerWave + 40 {
			wg.Go(func() {
				switch {
				case i < bulkPerWave:
					errs <- post("demo-cron-key", "bulk", "regular", 48)
				case i%2 == 0:
					errs <- post("demo-acme-key", "interactive", "premium", 4)
				default:
					errs <- post("demo-free-key", "system", "regular", 4)
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatalf("wave %d: %v", wave, err)
			}
		}
	}

	// Wait until Prometheus has scraped the end of the load, then one more.
	want := float64(2 * bulkPerWave)
	waitFor(t, 30*time.Second, fmt.Sprintf("Prometheus to see %v admitted bulk requests", want), func() bool {
		v, err := instant(ctx, prom.API, `sum(smg_scheduler_admit_total{class="bulk",outcome="admitted"})`)
		return err == nil && len(v) == 1 && float64(v[0].Value) >= want
	})
	queued, err := instant(ctx, prom.API, `sum(smg_scheduler_queue_wait_seconds_count{class="bulk"})`)
	if err != nil || len(queued) != 1 || queued[0].Value == 0 {
		t.Fatalf("no bulk request queued (%v, %v): the workload does not exercise the queue panels", queued, err)
	}
	awaitScrapes(ctx, t, prom.API, 1)

	for _, q := range dashboardQueries(t) {
		expr := strings.ReplaceAll(q.expr, "$__rate_interval", "1m")
		v, err := instant(ctx, prom.API, expr)
		if err != nil {
			t.Errorf("panel %q: %s: %v", q.panel, q.expr, err)
			continue
		}
		if len(v) == 0 {
			t.Errorf("panel %q: %s returned no series", q.panel, q.expr)
			continue
		}
		need := panelLabels(q)
		finite := false
		for _, s := range v {
			for _, l := range need {
				if s.Metric[model.LabelName(l)] == "" {
					t.Errorf("panel %q: series %v lacks the label %q its panel uses", q.panel, s.Metric, l)
				}
			}
			finite = finite || !math.IsNaN(float64(s.Value))
		}
		if !finite {
			t.Errorf("panel %q: %s returned only NaN: %v", q.panel, q.expr, v)
		}
	}

	groups, err := prom.API.Rules(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var recorded int
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			switch r := r.(type) {
			case promv1.RecordingRule:
				recorded++
				if r.Health != promv1.RuleHealthGood {
					t.Errorf("recording rule %s: health %s %s", r.Name, r.Health, r.LastError)
				}
				if v, err := instant(ctx, prom.API, r.Name); err != nil || len(v) == 0 {
					t.Errorf("recording rule %s: no series (%v)", r.Name, err)
				}
			case promv1.AlertingRule:
				if r.Health != promv1.RuleHealthGood {
					t.Errorf("alert %s: health %s %s", r.Name, r.Health, r.LastError)
				}
				if (r.Name == "TollgateNoReadyWorker" || r.Name == "TollgateNoLeader") && len(r.Alerts) > 0 {
					t.Errorf("alert %s is %s with workers and a leader", r.Name, r.State)
				}
			}
		}
	}
	if recorded == 0 {
		t.Error("Prometheus loaded no recording rules")
	}

	exposition := scrapeText(t, ctx, client, a.metrics)
	if problems := promserver.CheckMetrics(t, exposition); len(problems) > 0 {
		t.Errorf("promtool check metrics:\n%s", strings.Join(problems, "\n"))
	}
}

func instant(ctx context.Context, api promv1.API, expr string) (model.Vector, error) {
	v, warn, _, err := api.Query(ctx, expr, time.Now())
	if err != nil {
		return nil, err
	}
	if len(warn) > 0 {
		return nil, fmt.Errorf("warnings: %v", warn)
	}
	vec, ok := v.(model.Vector)
	if !ok {
		return nil, fmt.Errorf("result is a %s, want a vector", v.Type())
	}
	return vec, nil
}

func scrapeText(t *testing.T, ctx context.Context, c *http.Client, addr string) []byte {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "text/plain; version=0.0.4")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// awaitScrapes waits until Prometheus has scraped tollgate n more times and
// has evaluated every rule since the last of them. Prometheus is another
// process with no notification: this polls its API.
func awaitScrapes(ctx context.Context, t *testing.T, api promv1.API, n int) {
	t.Helper()
	lastScrape := func() float64 {
		v, err := instant(ctx, api, `timestamp(up{job="tollgate"})`)
		if err != nil || len(v) != 1 {
			return 0
		}
		return float64(v[0].Value)
	}
	last := lastScrape()
	for i := range n {
		waitFor(t, 30*time.Second, fmt.Sprintf("scrape %d of %d", i+1, n), func() bool {
			if ts := lastScrape(); ts > last {
				last = ts
				return true
			}
			return false
		})
	}
	scraped := time.UnixMilli(int64(last * 1000))
	waitFor(t, 30*time.Second, "the rules evaluated after the last scrape", func() bool {
		res, err := api.Rules(ctx, nil)
		if err != nil {
			return false
		}
		for _, g := range res.Groups {
			for _, r := range g.Rules {
				var at time.Time
				switch r := r.(type) {
				case promv1.RecordingRule:
					at = r.LastEvaluation
				case promv1.AlertingRule:
					at = r.LastEvaluation
				}
				if at.Before(scraped) {
					return false
				}
			}
		}
		return true
	})
}

// waitFor polls ok, for Prometheus's state, until it holds or limit passes.
func waitFor(t *testing.T, limit time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", limit, what)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
