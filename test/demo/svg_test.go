package demo

import (
	"bytes"
	"cmp"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/tollgate/tollgate/sched/policy"
)

// svgPanel is what parseSVG found in one panel group.
type svgPanel struct {
	title  string
	series []string // data-series of each polyline, in order
	points [][]Point
}

// svgBox is a rectangle in user units.
type svgBox struct{ x0, y0, x1, y1 float64 }

func (b svgBox) overlaps(o svgBox) bool {
	return b.x0 < o.x1 && o.x0 < b.x1 && b.y0 < o.y1 && o.y0 < b.y1
}

// svgText is a <text> element and the box its glyphs may cover.
type svgText struct {
	text string
	box  svgBox
}

// svgDoc is what inspectSVG read from a chart.
type svgDoc struct {
	w, h   float64
	panels []svgPanel
	texts  []svgText
	plots  []svgBox // the plot areas (rect class="plot")
}

// Glyph metrics for estimating a text's extent without a font: an average
// advance of 0.6 em (0.66 em bold), more than Helvetica's, Arial's or
// DejaVu Sans's average over prose and figures, and a line box from 0.8 em
// above the baseline to 0.2 em below it.
const (
	testGlyphEm, testBoldGlyphEm = 0.6, 0.66
	testAscent, testDescent      = 0.8, 0.2
)

// textBox estimates the box of text s at (x, y) with the given anchor,
// size and weight; rotated texts are translate(x y) rotate(-90), read
// bottom to top.
func textBox(s string, x, y, size float64, bold bool, anchor string, rotated bool) svgBox {
	em := testGlyphEm
	if bold {
		em = testBoldGlyphEm
	}
	w := float64(utf8.RuneCountInString(s)) * em * size
	a := 0.0 // the text's start along its baseline, from the anchor
	switch anchor {
	case "middle":
		a = -w / 2
	case "end":
		a = -w
	}
	if rotated {
		return svgBox{x - testAscent*size, y - a - w, x + testDescent*size, y - a}
	}
	return svgBox{x + a, y - testAscent*size, x + a + w, y + testDescent*size}
}

// inspectSVG parses doc as XML, checks the root and the viewBox, and
// returns the panels with their polylines, every text with its estimated
// box, and the plot areas.
func inspectSVG(doc []byte) (*svgDoc, error) {
	dec := xml.NewDecoder(bytes.NewReader(doc))
	d := &svgDoc{}
	depth, panelDepth := 0, -1
	// The font size and weight in effect at each depth (inherited).
	type font struct {
		size float64
		bold bool
	}
	fonts := []font{{size: 16}}
	var text *svgText // the open <text>, with what its box needs
	var tx, ty, tsize float64
	var tbold, trot bool
	var tanchor string
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("svg does not parse as XML: %w", err)
		}
		switch el := tok.(type) {
		case xml.StartElement:
			depth++
			attr := func(name string) string {
				for _, a := range el.Attr {
					if a.Name.Local == name {
						return a.Value
					}
				}
				return ""
			}
			num := func(name string) float64 {
				v, _ := strconv.ParseFloat(attr(name), 64) // absent: 0
				return v
			}
			f := fonts[len(fonts)-1]
			if v := attr("font-size"); v != "" {
				if f.size, err = strconv.ParseFloat(v, 64); err != nil {
					return nil, fmt.Errorf("font-size %q", v)
				}
			}
			if v := attr("font-weight"); v != "" {
				f.bold = v == "bold"
			}
			fonts = append(fonts, f)
			switch {
			case depth == 1:
				if el.Name.Local != "svg" || el.Name.Space != "http://www.w3.org/2000/svg" {
					return nil, fmt.Errorf("root element %v, want svg in the SVG namespace", el.Name)
				}
				f := strings.Fields(attr("viewBox"))
				if len(f) != 4 {
					return nil, fmt.Errorf("viewBox %q", attr("viewBox"))
				}
				d.w, _ = strconv.ParseFloat(f[2], 64)
				d.h, _ = strconv.ParseFloat(f[3], 64)
			case el.Name.Local == "g" && attr("class") == "panel":
				d.panels = append(d.panels, svgPanel{title: attr("data-title")})
				panelDepth = depth
			case el.Name.Local == "rect" && attr("class") == "plot":
				x, y := num("x"), num("y")
				d.plots = append(d.plots, svgBox{x, y, x + num("width"), y + num("height")})
			case el.Name.Local == "text":
				text = &svgText{}
				tx, ty, tsize, tbold, tanchor, trot = num("x"), num("y"), f.size, f.bold, attr("text-anchor"), false
				if tr := attr("transform"); tr != "" {
					if _, err := fmt.Sscanf(tr, "translate(%g %g) rotate(-90)", &tx, &ty); err != nil {
						return nil, fmt.Errorf("text transform %q: only translate(x y) rotate(-90) is understood", tr)
					}
					trot = true
				}
			case el.Name.Local == "polyline":
				if panelDepth < 0 {
					return nil, errors.New("polyline outside a panel")
				}
				p := &d.panels[len(d.panels)-1]
				p.series = append(p.series, attr("data-series"))
				var pts []Point
				for pair := range strings.FieldsSeq(attr("points")) {
					xs, ys, ok := strings.Cut(pair, ",")
					x, err1 := strconv.ParseFloat(xs, 64)
					y, err2 := strconv.ParseFloat(ys, 64)
					if !ok || err1 != nil || err2 != nil || x < 0 || x > d.w || y < 0 || y > d.h {
						return nil, fmt.Errorf("polyline %q has point %q outside the %gx%g view box", attr("data-series"), pair, d.w, d.h)
					}
					pts = append(pts, Point{x, y})
				}
				p.points = append(p.points, pts)
			}
		case xml.CharData:
			if text != nil {
				text.text += string(el)
			}
		case xml.EndElement:
			if el.Name.Local == "text" && text != nil {
				text.box = textBox(text.text, tx, ty, tsize, tbold, tanchor, trot)
				d.texts = append(d.texts, *text)
				text = nil
			}
			if depth == panelDepth {
				panelDepth = -1
			}
			fonts = fonts[:len(fonts)-1]
			depth--
		}
	}
	return d, nil
}

// rawFloat is a number printed with more decimals than a reader wants.
var rawFloat = regexp.MustCompile(`[0-9]\.[0-9]{4,}`)

// textProblems lists every text of d that may not fit: one whose
// estimated box leaves the canvas, overlaps another text's, or covers a
// plot area, or that prints a raw float.
func textProblems(d *svgDoc) []string {
	var out []string
	for i, t := range d.texts {
		b := t.box
		if b.x0 < 0 || b.y0 < 0 || b.x1 > d.w || b.y1 > d.h {
			out = append(out, fmt.Sprintf("text %q (%.0f,%.0f)-(%.0f,%.0f) leaves the %gx%g canvas", t.text, b.x0, b.y0, b.x1, b.y1, d.w, d.h))
		}
		for _, o := range d.texts[:i] {
			if b.overlaps(o.box) {
				out = append(out, fmt.Sprintf("text %q overlaps text %q", t.text, o.text))
			}
		}
		for _, p := range d.plots {
			if b.overlaps(p) {
				out = append(out, fmt.Sprintf("text %q covers the plot area", t.text))
			}
		}
		if rawFloat.MatchString(t.text) {
			out = append(out, fmt.Sprintf("text %q prints a raw float", t.text))
		}
	}
	return out
}

// parseSVG inspects doc, fails t on any text that may not fit (see
// textProblems), and returns the panels with their polylines. Every
// polyline point must lie inside the view box.
func parseSVG(t *testing.T, doc []byte) []svgPanel {
	t.Helper()
	d, err := inspectSVG(doc)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range textProblems(d) {
		t.Error(p)
	}
	return d.panels
}

func TestWriteSVG_OnePolylinePerClass(t *testing.T) {
	c := Chart{Title: `cumulative <completions> & "quotes"`}
	for p := range 2 {
		panel := Panel{Title: "panel & " + strconv.Itoa(p), XLabel: "seconds", YLabel: "requests",
			Markers: []Marker{{X: 1.5, Label: "a <marker>"}}}
		for i, name := range []string{"interactive", "default", "bulk"} {
			s := Series{Name: name, Color: palette[i], Points: []Point{{0, 0}}}
			for k := 1; k <= 50; k++ {
				s.Points = append(s.Points, Point{X: float64(k) * 0.1 * float64(i+1), Y: float64(k)})
			}
			panel.Series = append(panel.Series, s)
		}
		c.Panels = append(c.Panels, panel)
	}
	var buf bytes.Buffer
	if err := WriteSVG(&buf, c); err != nil {
		t.Fatal(err)
	}
	panels := parseSVG(t, buf.Bytes())
	if len(panels) != 2 {
		t.Fatalf("got %d panels, want 2", len(panels))
	}
	for i, p := range panels {
		if want := "panel & " + strconv.Itoa(i); p.title != want {
			t.Errorf("panel %d title %q, want %q", i, p.title, want)
		}
		if got := strings.Join(p.series, ","); got != "interactive,default,bulk" {
			t.Errorf("panel %d polylines %q, want one per class", i, got)
		}
		for j, pts := range p.points {
			if len(pts) != 51 {
				t.Errorf("panel %d series %d has %d points, want 51", i, j, len(pts))
			}
			// Cumulative counts: y (downwards in SVG) never increases.
			for k := 1; k < len(pts); k++ {
				if pts[k].Y > pts[k-1].Y {
					t.Fatalf("panel %d series %d is not monotone at point %d", i, j, k)
				}
			}
		}
	}
	for _, want := range []string{"<title>cumulative &lt;completions&gt; &amp; &#34;quotes&#34;</title>", ">seconds<", ">requests<", "a &lt;marker&gt;", ">interactive<"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("svg lacks %q", want)
		}
	}
}

func TestWriteSVG_RejectsNonFinite(t *testing.T) {
	for _, c := range []Chart{
		{Panels: []Panel{{Series: []Series{{Name: "x", Points: []Point{{math.NaN(), 1}}}}}}},
		{Panels: []Panel{{Series: []Series{{Name: "x", Points: []Point{{1, math.Inf(1)}}}}}}},
		{Panels: []Panel{{Markers: []Marker{{X: math.Inf(-1), Label: "m"}}}}},
	} {
		if err := WriteSVG(io.Discard, c); err == nil {
			t.Errorf("WriteSVG accepted a non-finite value in %+v", c)
		}
	}
}

func TestWriteSVG_EmptyPanel(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteSVG(&buf, Chart{Title: "empty", Panels: []Panel{{Title: "nothing yet"}}}); err != nil {
		t.Fatal(err)
	}
	if panels := parseSVG(t, buf.Bytes()); len(panels) != 1 || len(panels[0].series) != 0 {
		t.Fatalf("empty chart parsed as %+v", panels)
	}
}

func TestAxisRange(t *testing.T) {
	tests := []struct {
		give            float64
		wantStep, wantE float64
	}{
		{0, 1, 1},
		{10.2, 2, 12},
		{640, 100, 700},
		{320, 50, 350},
		{0.7, 0.1, 0.7},
		{5, 1, 5},
		{8.01, 2, 10},
	}
	for _, tt := range tests {
		step, end := axisRange(tt.give)
		if math.Abs(step-tt.wantStep) > 1e-9 || math.Abs(end-tt.wantE) > 1e-9 {
			t.Errorf("axisRange(%v) = %v, %v; want %v, %v", tt.give, step, end, tt.wantStep, tt.wantE)
		}
	}
}

// sampleCompletions is n completions, one every step, of classes 0 and 1
// in the ratio weight:1, every fourth request of each class through
// gateway B.
func sampleCompletions(n, weight int, step time.Duration) []completion {
	out := make([]completion, n)
	for i := range out {
		c := 0
		if i%(weight+1) == weight {
			c = 1
		}
		out[i] = completion{at: time.Duration(i+1) * step, class: c, gateway: (i / 2 % 4) / 3}
	}
	return out
}

// sampleCharts are the demo's charts drawn from results shaped like a
// full run's at speed 1, with the largest figures the scenarios produce.
func sampleCharts() map[string]Chart {
	premium := func(file string, quanta [2]uint64, weight int) *premiumArm {
		list := sampleCompletions(2*upstreamPerClass, weight, 6*time.Millisecond)
		a := &premiumArm{File: file, Quanta: quanta, PerClass: upstreamPerClass, First: [2]int{254, 66},
			RegularLeft: 238, PremiumDone: 3210 * time.Millisecond, Ingress: [2]int{480, 160},
			GatewayFirst: [2][2]int{{208, 53}, {47, 12}}}
		a.Series = series(list, premiumClasses, palette)
		a.GatewaySeries = seriesBy(list, func(c completion) int { return 2*c.gateway + c.class },
			[]string{"premium via A", "regular via A", "premium via B", "regular via B"}, palette)
		return a
	}
	legends := make([]string, len(priorityClasses))
	for i, c := range priorityClasses {
		legends[i] = c.legend
	}
	prio := &priorityResult{Capacity: 256, BulkSlots: 70, InteractiveSlots: 154,
		Phase2: 4330 * time.Millisecond, PreemptedAt: 4680 * time.Millisecond,
		Series: series(append(sampleCompletions(600, 2, 10*time.Millisecond), completion{at: 6 * time.Second, class: 2}), legends, palette)}
	var engine []*engineArm
	for i, name := range []string{"bookings only", "engine metrics"} {
		a := &engineArm{Name: name, P50: 34 * time.Millisecond, P99: 1433 * time.Millisecond,
			ToSlow: 26, Total: engineRequests, PeakQueue: 11 - 3*i}
		for j := range engineRequests {
			a.TTFT = append(a.TTFT, time.Duration(30+j*j/40)*time.Millisecond)
			a.Queue = append(a.Queue, Point{X: float64(j) * 0.03, Y: float64(8 + j%4)})
		}
		engine = append(engine, a)
	}
	var kv []kvArm
	for i, name := range []string{"approximate index", "KV events"} {
		a := kvArm{Name: name, Events: i == 1, Within1: 0.88, Within5: 0.9, MeanErr: 0.048, HitRate: 0.826,
			TTFT50: 10236 * time.Microsecond, TTFT99: 57169670 * time.Nanosecond}
		for k, b := range []float64{1, 5, 10, 25, 50, 100} {
			a.ErrOver = append(a.ErrOver, Point{X: b, Y: max(0, 12-2.5*float64(k))})
		}
		for j := range kvSessions * kvTurns {
			a.Cached = append(a.Cached, 700+j%512)
			a.TTFTs = append(a.TTFTs, time.Duration(7+j/3)*time.Millisecond)
		}
		kv = append(kv, a)
	}
	var fair []*fairArm
	for i, mode := range []policy.FairnessMode{policy.FairnessNone, policy.FairnessTenant} {
		list := sampleCompletions(noisyRequests+quietRequests, 10, 7*time.Millisecond)
		fair = append(fair, &fairArm{Mode: mode, Sent: [2]int{noisyRequests, quietRequests},
			WaitP50: [2]time.Duration{1868 * time.Millisecond, 1868 * time.Millisecond},
			WaitP99: [2]time.Duration{12976 * time.Millisecond, 12976 * time.Millisecond},
			Share:   [2]float64{1 - 0.39*float64(i), 0.39 * float64(i)}, QuietDone: 3700 * time.Millisecond,
			Series: series(list, []string{"noisy", "quiet"}, palette)})
	}
	rollout := &rolloutResult{File: filePremium4x, Quanta: [2]uint64{512, 128}, Replicas: rolloutReplicas, Clients: rolloutClients,
		Sent: 4812, OK: 4812, Both: [2]int{3801, 950}}
	list := sampleCompletions(4812, 4, 2*time.Millisecond)
	rollout.Series = series(list, premiumClasses, palette)
	for i, c := range list {
		rollout.Gaps = append(rollout.Gaps, Point{X: c.at.Seconds(), Y: float64(3 + i%20)})
	}
	for i, to := range []string{"tollgate-1", "tollgate-0", ""} {
		at := time.Duration(1500+1750*i) * time.Millisecond
		rollout.Steps = append(rollout.Steps, rollStep{Replica: replicaID(i), To: to,
			HandoverAt: at, Pause: 312 * time.Millisecond, OutAt: at + 30*time.Millisecond, Out: 1234 * time.Millisecond})
	}
	return map[string]Chart{
		"rollout":  rolloutChart(rollout),
		"premium":  premiumChart([]*premiumArm{premium(fileEqualShare, [2]uint64{512, 512}, 1), premium(filePremium4x, [2]uint64{512, 128}, 4)}),
		"priority": priorityChart(prio),
		"engine":   engineChart(engine),
		"kvevents": kvChart(kv),
		"fairness": fairChart(fair),
		"gateways": gatewaysChart(premium(filePremium4x, [2]uint64{512, 128}, 4)),
	}
}

// TestCharts_TextsFit draws each of the demo's charts and checks that
// every text fits its canvas, overlaps no other text and leaves the plots
// clear (parseSVG), that no legend entry ends in a bare figure without its
// unit, and that the KV-events chart plots the estimate error.
func TestCharts_TextsFit(t *testing.T) {
	bare := regexp.MustCompile(`: [0-9.]+$`)
	for name, c := range sampleCharts() {
		t.Run(name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := WriteSVG(&buf, c); err != nil {
				t.Fatal(err)
			}
			panels := parseSVG(t, buf.Bytes())
			if len(panels) != len(c.Panels) {
				t.Fatalf("%d panels drawn, want %d", len(panels), len(c.Panels))
			}
			for _, p := range c.Panels {
				if p.XLabel == "" || p.YLabel == "" {
					t.Errorf("panel %q lacks an axis title", p.Title)
				}
				for _, s := range p.Series {
					if l := cmp.Or(s.Legend, s.Name); bare.MatchString(l) {
						t.Errorf("legend %q ends in a figure without a unit", l)
					}
				}
			}
		})
	}
	kv := sampleCharts()["kvevents"]
	if len(kv.Panels) == 0 || !strings.Contains(kv.Panels[0].Title, "estimate error") || len(kv.Panels[0].Series) != 2 {
		t.Errorf("the KV-events chart's first panel is %q; want the estimate error of both arms", kv.Panels[0].Title)
	}
	gw := sampleCharts()["gateways"]
	title := strings.ToLower(gw.Title)
	if len(gw.Panels) != 2 || len(gw.Panels[1].Series) != 4 || !strings.Contains(title, "two gateways, two tollgate replicas, one scheduler") || !strings.Contains(title, "3:1") {
		t.Errorf("the gateways chart (%q, %d panels) does not show both gateways, their replicas and the 3:1 ingress", gw.Title, len(gw.Panels))
	}
	ro := sampleCharts()["rollout"]
	if len(ro.Panels) != 2 || len(ro.Panels[0].Markers) != 2 || len(ro.Panels[1].Markers) != rolloutReplicas {
		t.Errorf("the rollout chart (%d panels) does not mark both handovers, then each replica's roll", len(ro.Panels))
	}
}

// TestWriteSVG_CrowdedTexts draws long titles and legends and markers in
// a cluster and at both edges: titles and legends wrap, marker labels
// stack above the plot, and every text still fits.
func TestWriteSVG_CrowdedTexts(t *testing.T) {
	long := strings.Repeat("a long title that goes on ", 12)
	p := Panel{Title: long, XLabel: "seconds", YLabel: "cumulative cached tokens"}
	for i := range 6 {
		p.Series = append(p.Series, Series{Name: fmt.Sprintf("series %d", i), Color: palette[i],
			Legend: fmt.Sprintf("series %d with a long legend: %d requests", i, 1000*i),
			Points: []Point{{0, 0}, {10, 123456 * float64(i+1)}}})
	}
	for _, x := range []float64{0, 0.1, 4.9, 5, 5.1, 5.2, 9.9, 10} {
		p.Markers = append(p.Markers, Marker{X: x, Label: fmt.Sprintf("marker at %g s", x)})
	}
	var buf bytes.Buffer
	if err := WriteSVG(&buf, Chart{Title: long, Subtitle: long, Panels: []Panel{p, p}}); err != nil {
		t.Fatal(err)
	}
	parseSVG(t, buf.Bytes())
}

// TestTextProblems_FindsOverlaps feeds the checker the faults the demo's
// charts once had: a y axis title over a six-digit tick label, a title
// running off the canvas, a marker label inside the plot, a raw float.
func TestTextProblems_FindsOverlaps(t *testing.T) {
	doc := `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 960 400" font-size="13">
<rect class="plot" x="78" y="64" width="846" height="240"/>
<text x="70" y="100" text-anchor="end">100000</text>
<text transform="translate(26 184) rotate(-90)" text-anchor="middle">cumulative cached tokens</text>
<text x="78" y="28" font-size="18" font-weight="bold">Premium vs regular through two gateways (3:1 ingress), one tollgate: cumulative completions</text>
<text x="600" y="76" font-size="11">one bulk job preempted</text>
<text x="100" y="340">approximate index: 57.169669999999996</text>
</svg>`
	d, err := inspectSVG([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(textProblems(d), "\n")
	for _, want := range []string{
		`text "cumulative cached tokens" overlaps text "100000"`,
		`text "Premium vs regular through two gateways (3:1 ingress), one tollgate: cumulative completions" (`,
		`text "one bulk job preempted" covers the plot area`,
		`prints a raw float`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("problems lack %q:\n%s", want, got)
		}
	}
}
