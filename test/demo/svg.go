package demo

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Chart is a figure of one or more panels stacked vertically, each a line
// chart, under a title and an optional subtitle that says what the
// scenario does.
type Chart struct {
	Title string
	// Subtitle is wrapped to the chart's width under the title.
	Subtitle string
	Panels   []Panel
}

// Panel is one line chart: a title, a legend, optional vertical markers
// labelled above the plot, one polyline per series, and axes with ticks
// and labels.
type Panel struct {
	Title   string
	XLabel  string
	YLabel  string
	Series  []Series
	Markers []Marker
}

// Series is one line. Points are drawn in order.
type Series struct {
	// Name identifies the series (the polyline's data-series).
	Name string
	// Legend is the legend text, with the figure and unit it reports;
	// empty means Name.
	Legend string
	Color  string // an SVG color, e.g. "#1f77b4"
	Points []Point
	// Dots marks every point, for a series of a few measured points
	// joined by straight lines.
	Dots bool
}

// Point is one data point.
type Point struct{ X, Y float64 }

// Marker is a labelled dashed vertical line at X. Its label is set in a
// band above the plot, so it never covers the data.
type Marker struct {
	X     float64
	Label string
}

// palette is the series colors, in order (colorblind-safe).
var palette = []string{"#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00", "#56b4e9"}

// Chart geometry, in SVG user units.
const (
	chartWidth  = 960
	marginRight = 36
	plotHeight  = 240
	// Font sizes and line heights.
	titleSize, titleLine       = 18, 24
	subtitleSize, subtitleLine = 13, 18
	panelTitleSize, panelLine  = 15, 20
	fontSize, legendLine       = 13, 20
	markerSize, markerLine     = 11, 14
	// Left of the plot: the y tick labels end yTickGap before the axis,
	// the y axis title sits yTitleGap left of the widest tick label, and
	// leftPad is left of it.
	yTickGap, yTitleGap, leftPad = 8, 10, 12
	minMarginLeft                = 64
	// glyphEm and boldGlyphEm are a generous average glyph width, in ems,
	// of a sans-serif font (Helvetica, Arial, DejaVu Sans), to lay text
	// out without measuring it.
	glyphEm, boldGlyphEm = 0.6, 0.66
)

// textWidth estimates the width of s at size.
func textWidth(s string, size float64, bold bool) float64 {
	em := glyphEm
	if bold {
		em = boldGlyphEm
	}
	return float64(utf8.RuneCountInString(s)) * size * em
}

// wrap breaks s into lines no wider than width at size, at spaces.
func wrap(s string, size, width float64, bold bool) []string {
	var lines []string
	line := ""
	for w := range strings.FieldsSeq(s) {
		switch {
		case line == "":
			line = w
		case textWidth(line+" "+w, size, bold) <= width:
			line += " " + w
		default:
			lines = append(lines, line)
			line = w
		}
	}
	if line != "" {
		lines = append(lines, line)
	}
	return lines
}

// baseline is the baseline of a line of text at size centered in a line
// of height lh whose top is y.
func baseline(y, size, lh float64) float64 { return y + (lh+size)/2 - 0.2*size }

// axis is one panel's axis ranges.
type axis struct{ xStep, xEnd, yStep, yEnd float64 }

func panelAxis(p Panel) axis {
	xMax, yMax := 0.0, 0.0
	for _, s := range p.Series {
		for _, pt := range s.Points {
			xMax, yMax = max(xMax, pt.X), max(yMax, pt.Y)
		}
	}
	for _, m := range p.Markers {
		xMax = max(xMax, m.X)
	}
	var a axis
	a.xStep, a.xEnd = axisRange(xMax)
	a.yStep, a.yEnd = axisRange(yMax)
	return a
}

// ticks returns the tick values 0, step, ... up to end.
func ticks(step, end float64) []float64 {
	var out []float64
	for i := 0; ; i++ {
		v := float64(i) * step
		if v > end+step/1e6 {
			return out
		}
		out = append(out, v)
	}
}

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
	// The plot's left edge makes room for the widest y tick label of any
	// panel and the y axis title, so the panels line up.
	left := float64(minMarginLeft)
	axes := make([]axis, len(c.Panels))
	for i, p := range c.Panels {
		axes[i] = panelAxis(p)
		for _, v := range ticks(axes[i].yStep, axes[i].yEnd) {
			tw := textWidth(tickLabel(v, axes[i].yStep), fontSize, false)
			left = max(left, math.Ceil(leftPad+fontSize+yTitleGap+tw+yTickGap))
		}
	}
	width := chartWidth - left - marginRight

	var body bytes.Buffer
	bw := bufio.NewWriter(&body)
	y := 12.0
	for _, line := range wrap(c.Title, titleSize, width, true) {
		fmt.Fprintf(bw, `<text x="%g" y="%.1f" font-size="%d" font-weight="bold">%s</text>`+"\n", left, baseline(y, titleSize, titleLine), titleSize, esc(line))
		y += titleLine
	}
	for _, line := range wrap(c.Subtitle, subtitleSize, width, false) {
		fmt.Fprintf(bw, `<text class="subtitle" x="%g" y="%.1f" font-size="%d" fill="#444">%s</text>`+"\n", left, baseline(y, subtitleSize, subtitleLine), subtitleSize, esc(line))
		y += subtitleLine
	}
	y += 8
	for i, p := range c.Panels {
		y = writePanel(bw, p, axes[i], left, y)
	}
	if len(c.Panels) == 0 {
		y += plotHeight
	}
	height := int(math.Ceil(y + 8))
	_ = bw.Flush() // writes to a buffer: cannot fail

	out := bufio.NewWriter(w)
	fmt.Fprintf(out, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="Helvetica, Arial, sans-serif" font-size="%d">`+"\n",
		chartWidth, height, chartWidth, height, fontSize)
	fmt.Fprintf(out, "<title>%s</title>\n", esc(c.Title))
	fmt.Fprintf(out, `<rect width="%d" height="%d" fill="#ffffff"/>`+"\n", chartWidth, height)
	_, _ = out.Write(body.Bytes())     // a bufio.Writer error is sticky: Flush reports it
	_, _ = out.WriteString("</svg>\n") // likewise
	return out.Flush()
}

// markerLabel is a marker's label placed in the band above the plot.
type markerLabel struct {
	x, a, b float64 // the line, the label's left and right edge
	anchor  string
	row     int // 0 is the row next to the plot
}

// placeMarkers lays the marker labels out in rows above the plot: each
// label beside its line, right of it in the plot's left half and left of
// it in the right half where it can, in the lowest row where it overlaps
// no other label, crosses no line rising to a higher row, and is crossed
// by none. Labels are placed from the middle outwards, so that a cluster
// of lines gets a staircase: the outer lines rise past the inner labels.
// The lowest row stays right of the plot's left edge, where the top y
// tick label reaches into it.
func placeMarkers(xs []float64, labels []string, left, right float64) []markerLabel {
	const gap = 6
	mid := (left + right) / 2
	order := make([]int, len(xs))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(i, j int) int { return cmp.Compare(math.Abs(xs[i]-mid), math.Abs(xs[j]-mid)) })
	out := make([]markerLabel, len(xs))
	var done []markerLabel
	fits := func(m markerLabel) bool {
		if m.a < 0 || m.b > chartWidth || (m.row == 0 && m.a < left) {
			return false
		}
		for _, p := range done {
			switch {
			case p.row == m.row && m.a < p.b+gap && p.a < m.b+gap,
				p.row < m.row && m.x >= p.a-2 && m.x <= p.b+2,
				p.row > m.row && p.x >= m.a-2 && p.x <= m.b+2:
				return false
			}
		}
		return true
	}
	for _, i := range order {
		x, w := xs[i], textWidth(labels[i], markerSize, false)
		sides := []markerLabel{
			{x: x, anchor: "start", a: x + 4, b: x + 4 + w},
			{x: x, anchor: "end", a: x - 4 - w, b: x - 4},
		}
		if x > mid {
			sides[0], sides[1] = sides[1], sides[0]
		}
		top := 0
		for _, p := range done {
			top = max(top, p.row+1)
		}
		// Where no row fits, a new row on top, on the side that stays on
		// the canvas.
		m := sides[0]
		if m.a < 0 || m.b > chartWidth {
			m = sides[1]
		}
		m.row = top
	rows:
		for row := 0; row <= top; row++ {
			for _, c := range sides {
				if c.row = row; fits(c) {
					m = c
					break rows
				}
			}
		}
		out[i] = m
		done = append(done, m)
	}
	return out
}

// writePanel draws p with its top edge at y0 and returns its bottom edge.
// Write errors are sticky in w and reported by WriteSVG's Flush.
func writePanel(w *bufio.Writer, p Panel, a axis, left, y0 float64) float64 {
	plotW := chartWidth - left - marginRight
	right := left + plotW
	px := func(x float64) float64 { return left + x/a.xEnd*plotW }

	fmt.Fprintf(w, `<g class="panel" data-title="%s">`+"\n", esc(p.Title))
	y := y0 + 10
	for _, line := range wrap(p.Title, panelTitleSize, plotW, true) {
		fmt.Fprintf(w, `<text x="%g" y="%.1f" font-size="%d" font-weight="bold">%s</text>`+"\n", left, baseline(y, panelTitleSize, panelLine), panelTitleSize, esc(line))
		y += panelLine
	}
	y += 4
	// The legend: entries left to right, wrapped into rows.
	if len(p.Series) > 0 {
		lx := left
		for i, s := range p.Series {
			label := cmp.Or(s.Legend, s.Name)
			ew := 28 + textWidth(label, fontSize, false)
			if lx > left && lx+ew > right {
				lx, y = left, y+legendLine
			}
			ly := baseline(y, fontSize, legendLine)
			fmt.Fprintf(w, `<line class="legend" x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="3"%s/>`+"\n", lx, ly-4, lx+22, ly-4, esc(s.Color), dash(i))
			fmt.Fprintf(w, `<text x="%.1f" y="%.1f">%s</text>`+"\n", lx+28, ly, esc(label))
			lx += ew + 24
		}
		y += legendLine
	}
	y += 6
	// The marker labels' band.
	xs := make([]float64, len(p.Markers))
	labels := make([]string, len(p.Markers))
	for i, m := range p.Markers {
		xs[i], labels[i] = px(m.X), m.Label
	}
	placed := placeMarkers(xs, labels, left, right)
	rows := 0
	for _, m := range placed {
		rows = max(rows, m.row+1)
	}
	bandTop := y
	y += float64(rows*markerLine) + 4
	top := y
	bottom := top + plotHeight
	py := func(v float64) float64 { return bottom - v/a.yEnd*plotHeight }

	fmt.Fprintf(w, `<rect class="plot" x="%.1f" y="%.1f" width="%.1f" height="%d" fill="none"/>`+"\n", left, top, plotW, plotHeight)
	// Grid and ticks.
	for _, x := range ticks(a.xStep, a.xEnd) {
		fmt.Fprintf(w, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#e5e5e5"/>`+"\n", px(x), top, px(x), bottom)
		fmt.Fprintf(w, `<text x="%.1f" y="%.1f" text-anchor="middle" fill="#444">%s</text>`+"\n", px(x), bottom+18, tickLabel(x, a.xStep))
	}
	for _, v := range ticks(a.yStep, a.yEnd) {
		fmt.Fprintf(w, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#e5e5e5"/>`+"\n", left, py(v), right, py(v))
		fmt.Fprintf(w, `<text x="%.1f" y="%.1f" text-anchor="end" fill="#444">%s</text>`+"\n", left-yTickGap, py(v)+4, tickLabel(v, a.yStep))
	}
	// Axes and their titles; the y title's baseline is a fifth of its
	// size right of its glyphs' left edge.
	fmt.Fprintf(w, `<path d="M%.1f %.1f V%.1f H%.1f" fill="none" stroke="#222"/>`+"\n", left, top, bottom, right)
	fmt.Fprintf(w, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", left+plotW/2, bottom+40, esc(p.XLabel))
	fmt.Fprintf(w, `<text transform="translate(%.1f %.1f) rotate(-90)" text-anchor="middle">%s</text>`+"\n", leftPad+0.8*fontSize, top+plotHeight/2, esc(p.YLabel))
	// Markers: the line rises from the x axis to its label's row.
	for i, m := range placed {
		rowTop := bandTop + float64((rows-1-m.row)*markerLine)
		fmt.Fprintf(w, `<line class="marker" x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#777" stroke-dasharray="5 4"/>`+"\n", m.x, rowTop+2, m.x, bottom)
		tx := m.a
		if m.anchor == "end" {
			tx = m.b
		}
		fmt.Fprintf(w, `<text class="marker" x="%.1f" y="%.1f" font-size="%d" fill="#555" text-anchor="%s">%s</text>`+"\n",
			tx, baseline(rowTop, markerSize, markerLine), markerSize, m.anchor, esc(p.Markers[i].Label))
	}
	// Series.
	for i, s := range p.Series {
		var pts strings.Builder
		for j, pt := range s.Points {
			if j > 0 {
				pts.WriteByte(' ')
			}
			fmt.Fprintf(&pts, "%.1f,%.1f", px(pt.X), py(pt.Y))
		}
		fmt.Fprintf(w, `<polyline class="series" data-series="%s" fill="none" stroke="%s" stroke-width="2" stroke-linejoin="round"%s points="%s"/>`+"\n",
			esc(s.Name), esc(s.Color), dash(i), pts.String())
		if s.Dots {
			for _, pt := range s.Points {
				fmt.Fprintf(w, `<circle cx="%.1f" cy="%.1f" r="3.5" fill="%s"/>`+"\n", px(pt.X), py(pt.Y), esc(s.Color))
			}
		}
	}
	_, _ = w.WriteString("</g>\n")
	return bottom + 52
}

// dash is the stroke pattern of the i-th series: every other one is
// dashed, so lines that coincide (an equal share) both stay visible.
func dash(i int) string {
	if i%2 == 1 {
		return ` stroke-dasharray="9 5"`
	}
	return ""
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

// tickLabel formats a tick value with as many decimals as its step needs,
// in thousands ("20k") from a step of 1,000 and millions from 1,000,000.
func tickLabel(v, step float64) string {
	suffix := ""
	switch {
	case step >= 1e6:
		v, step, suffix = v/1e6, step/1e6, "M"
	case step >= 1e3:
		v, step, suffix = v/1e3, step/1e3, "k"
	}
	if v == 0 && suffix != "" {
		return "0"
	}
	decimals := max(0, int(math.Ceil(-math.Log10(step)-1e-9)))
	return strconv.FormatFloat(v, 'f', decimals, 64) + suffix
}

// esc escapes s for XML text and attribute values.
func esc(s string) string {
	var b bytes.Buffer
	_ = xml.EscapeText(&b, []byte(s)) // writes to a buffer: cannot fail
	return b.String()
}

func finite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }
