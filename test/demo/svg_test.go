package demo

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"math"
	"strconv"
	"strings"
	"testing"
)

// svgPanel is what parseSVG found in one panel group.
type svgPanel struct {
	title  string
	series []string // data-series of each polyline, in order
	points [][]Point
}

// parseSVG parses doc as XML, checks the root and the viewBox, and returns
// the panels with their polylines. Every polyline point must lie inside the
// view box.
func parseSVG(t *testing.T, doc []byte) []svgPanel {
	t.Helper()
	dec := xml.NewDecoder(bytes.NewReader(doc))
	var panels []svgPanel
	var w, h float64
	depth, panelDepth := 0, -1
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("svg does not parse as XML: %v", err)
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
			switch {
			case depth == 1:
				if el.Name.Local != "svg" || el.Name.Space != "http://www.w3.org/2000/svg" {
					t.Fatalf("root element %v, want svg in the SVG namespace", el.Name)
				}
				f := strings.Fields(attr("viewBox"))
				if len(f) != 4 {
					t.Fatalf("viewBox %q", attr("viewBox"))
				}
				w, _ = strconv.ParseFloat(f[2], 64)
				h, _ = strconv.ParseFloat(f[3], 64)
			case el.Name.Local == "g" && attr("class") == "panel":
				panels = append(panels, svgPanel{title: attr("data-title")})
				panelDepth = depth
			case el.Name.Local == "polyline":
				if panelDepth < 0 {
					t.Fatalf("polyline outside a panel")
				}
				p := &panels[len(panels)-1]
				p.series = append(p.series, attr("data-series"))
				var pts []Point
				for pair := range strings.FieldsSeq(attr("points")) {
					xs, ys, ok := strings.Cut(pair, ",")
					x, err1 := strconv.ParseFloat(xs, 64)
					y, err2 := strconv.ParseFloat(ys, 64)
					if !ok || err1 != nil || err2 != nil || x < 0 || x > w || y < 0 || y > h {
						t.Fatalf("polyline %q has point %q outside the %gx%g view box", attr("data-series"), pair, w, h)
					}
					pts = append(pts, Point{x, y})
				}
				p.points = append(p.points, pts)
			}
		case xml.EndElement:
			if depth == panelDepth {
				panelDepth = -1
			}
			depth--
		}
	}
	return panels
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
	for _, want := range []string{"<title>cumulative &lt;completions&gt; &amp; &#34;quotes&#34;</title>", ">seconds<", ">requests<", "a &lt;marker&gt;", "interactive: 50"} {
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
