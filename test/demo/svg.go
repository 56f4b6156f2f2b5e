package demo

import (
	"bufio"
	"bytes"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// Chart is a figure of one or more panels stacked vertically, each a line
// chart of cumulative counts over time.
type Chart struct {
	Title  string
	Panels []Panel
}

// Panel is one line chart: one polyline per series, optional vertical
// markers, axes with ticks and labels, and a legend row under its title.
type Panel struct {
	Title   string
	XLabel  string
	YLabel  string
	Series  []Series
	Markers []Marker
}

// Series is one class's line. Points are drawn in order.
type Series struct {
	Name   string
	Color  string // an SVG color, e.g. "#1f77b4"
	Points []Point
}

// Point is one data point.
type Point struct{ X, Y float64 }

// Marker is a labelled dashed vertical line at X.
type Marker struct {
	X     float64
	Label string
}

// palette is the series colors, in order (colorblind-safe).
var palette = []string{"#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00"}

// Chart geometry, in SVG user units.
const (
	chartWidth   = 960
	titleHeight  = 44
	panelHeight  = 360
	marginLeft   = 78
	marginRight  = 36
	marginTop    = 64
	marginBottom = 56
	// charWidth estimates the width of one character of the 13-unit font,
	// to lay out the legend row.
	charWidth = 7.2
)

// WriteSVG writes c as a standalone SVG document.
func WriteSVG(w io.Writer, c Chart) error {
	for _, p := range c.Panels {
		for _, s := range p.Series {
			for _, pt := range s.Points {
				if !finite(pt.X) || !finite(pt.Y) {
					return fmt.Errorf("demo: chart series %q has a non-finite point", s.Name)
				}
			}
		}
		for _, m := range p.Markers {
			if !finite(m.X) {
				return fmt.Errorf("demo: chart marker %q is not finite", m.Label)
			}
		}
	}
	height := titleHeight + panelHeight*max(len(c.Panels), 1)
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="Helvetica, Arial, sans-serif" font-size="13">`+"\n",
		chartWidth, height, chartWidth, height)
	fmt.Fprintf(bw, "<title>%s</title>\n", esc(c.Title))
	fmt.Fprintf(bw, `<rect width="%d" height="%d" fill="#ffffff"/>`+"\n", chartWidth, height)
	fmt.Fprintf(bw, `<text x="%d" y="28" font-size="18" font-weight="bold">%s</text>`+"\n", marginLeft, esc(c.Title))
	for i, p := range c.Panels {
		writePanel(bw, p, titleHeight+i*panelHeight)
	}
	_, _ = bw.WriteString("</svg>\n") // a bufio.Writer error is sticky: Flush reports it
	return bw.Flush()
}

// writePanel draws p with its top edge at y0. Write errors are sticky in
// w and reported by WriteSVG's Flush.
func writePanel(w *bufio.Writer, p Panel, y0 int) {
	plotW := float64(chartWidth - marginLeft - marginRight)
	plotH := float64(panelHeight - marginTop - marginBottom)
	left, top := float64(marginLeft), float64(y0+marginTop)
	bottom := top + plotH

	xMax, yMax := 0.0, 0.0
	for _, s := range p.Series {
		for _, pt := range s.Points {
			xMax, yMax = max(xMax, pt.X), max(yMax, pt.Y)
		}
	}
	for _, m := range p.Markers {
		xMax = max(xMax, m.X)
	}
	xStep, xEnd := axisRange(xMax)
	yStep, yEnd := axisRange(yMax)
	px := func(x float64) float64 { return left + x/xEnd*plotW }
	py := func(y float64) float64 { return bottom - y/yEnd*plotH }

	fmt.Fprintf(w, `<g class="panel" data-title="%s">`+"\n", esc(p.Title))
	fmt.Fprintf(w, `<text x="%g" y="%d" font-size="15" font-weight="bold">%s</text>`+"\n", left, y0+24, esc(p.Title))
	// Grid and ticks.
	for i := 0; ; i++ {
		x := float64(i) * xStep
		if x > xEnd+xStep/1e6 {
			break
		}
		fmt.Fprintf(w, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#e5e5e5"/>`+"\n", px(x), top, px(x), bottom)
		fmt.Fprintf(w, `<text x="%.1f" y="%.1f" text-anchor="middle" fill="#444">%s</text>`+"\n", px(x), bottom+18, tickLabel(x, xStep))
	}
	for i := 0; ; i++ {
		y := float64(i) * yStep
		if y > yEnd+yStep/1e6 {
			break
		}
		fmt.Fprintf(w, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#e5e5e5"/>`+"\n", left, py(y), left+plotW, py(y))
		fmt.Fprintf(w, `<text x="%.1f" y="%.1f" text-anchor="end" fill="#444">%s</text>`+"\n", left-8, py(y)+4, tickLabel(y, yStep))
	}
	// Axes and their labels.
	fmt.Fprintf(w, `<path d="M%.1f %.1f V%.1f H%.1f" fill="none" stroke="#222"/>`+"\n", left, top, bottom, left+plotW)
	fmt.Fprintf(w, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", left+plotW/2, bottom+40, esc(p.XLabel))
	fmt.Fprintf(w, `<text transform="translate(%.1f %.1f) rotate(-90)" text-anchor="middle">%s</text>`+"\n", left-52, top+plotH/2, esc(p.YLabel))
	// Markers, labels staggered so neighbours do not overlap.
	for i, m := range p.Markers {
		x := px(m.X)
		fmt.Fprintf(w, `<line class="marker" x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#777" stroke-dasharray="5 4"/>`+"\n", x, top, x, bottom)
		// Labels right of the middle end at their line, so none is clipped.
		anchor, tx := "start", x+4
		if x > left+plotW/2 {
			anchor, tx = "end", x-4
		}
		fmt.Fprintf(w, `<text x="%.1f" y="%.1f" font-size="11" fill="#555" text-anchor="%s">%s</text>`+"\n", tx, top+12+float64(i%3)*14, anchor, esc(m.Label))
	}
	// Series, and the legend row under the title.
	lx := left
	for i, s := range p.Series {
		// Every other series is dashed, so lines that coincide (an equal
		// share) both stay visible.
		dash := ""
		if i%2 == 1 {
			dash = ` stroke-dasharray="9 5"`
		}
		var pts strings.Builder
		for j, pt := range s.Points {
			if j > 0 {
				pts.WriteByte(' ')
			}
			fmt.Fprintf(&pts, "%.1f,%.1f", px(pt.X), py(pt.Y))
		}
		fmt.Fprintf(w, `<polyline class="series" data-series="%s" fill="none" stroke="%s" stroke-width="2" stroke-linejoin="round"%s points="%s"/>`+"\n",
			esc(s.Name), esc(s.Color), dash, pts.String())
		last := 0.0
		if n := len(s.Points); n > 0 {
			last = s.Points[n-1].Y
		}
		label := fmt.Sprintf("%s: %s", s.Name, strconv.FormatFloat(last, 'f', -1, 64))
		ly := float64(y0 + 46)
		fmt.Fprintf(w, `<line class="legend" x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="3"%s/>`+"\n", lx, ly-4, lx+22, ly-4, esc(s.Color), dash)
		fmt.Fprintf(w, `<text x="%.1f" y="%.1f">%s</text>`+"\n", lx+28, ly, esc(label))
		lx += 28 + float64(len(label))*charWidth + 24
	}
	_, _ = w.WriteString("</g>\n")
}

// axisRange picks a 1-2-5 tick step giving four to eight ticks up to v and
// the axis end, a whole number of steps at or above v.
func axisRange(v float64) (step, end float64) {
	if v <= 0 {
		return 1, 1
	}
	raw := v / 8
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	switch f := raw / mag; {
	case f <= 1:
		step = mag
	case f <= 2:
		step = 2 * mag
	case f <= 5:
		step = 5 * mag
	default:
		step = 10 * mag
	}
	return step, math.Ceil(v/step-1e-9) * step
}

// tickLabel formats a tick value with as many decimals as its step needs.
func tickLabel(v, step float64) string {
	decimals := max(0, int(math.Ceil(-math.Log10(step)-1e-9)))
	return strconv.FormatFloat(v, 'f', decimals, 64)
}

// esc escapes s for XML text and attribute values.
func esc(s string) string {
	var b bytes.Buffer
	_ = xml.EscapeText(&b, []byte(s)) // writes to a buffer: cannot fail
	return b.String()
}

func finite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }
