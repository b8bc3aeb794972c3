package job

import (
	"bufio"
	"fmt"
	"html"
	"io"
	"strings"
	"time"

	"github.com/vramhq/vram/detect"
	"github.com/vramhq/vram/internal/units"
)

// WriteHTML writes a self-contained page (inline SVG and CSS, no scripts,
// no external assets) with the job's memory over time per GPU and per
// process, the peak, the OOM, the limit and the leak's slope marked. The
// page is well-formed XML as well as HTML, so it can be checked and
// post-processed with XML tools.
func (r *Result) WriteHTML(w io.Writer) error {
	bw := bufio.NewWriter(w)
	e := html.EscapeString
	fmt.Fprintf(bw, `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8"/>
<title>vram run: %s</title>
<style>
body { font: 14px/1.4 system-ui, sans-serif; margin: 2em; color: #222; max-width: 1100px; }
h1 { font-size: 1.3em; } h2 { font-size: 1.1em; margin-top: 2em; }
code { background: #f3f3f3; padding: 0 .3em; }
table { border-collapse: collapse; } td, th { padding: .2em .8em; border-bottom: 1px solid #ddd; text-align: left; vertical-align: top; }
svg { background: #fcfcfc; border: 1px solid #ddd; }
.axis { stroke: #999; stroke-width: 1; } .grid { stroke: #eee; stroke-width: 1; }
.lbl { font-size: 11px; fill: #555; }
.bad { color: #b00; } .ok { color: #070; }
.legend span { display: inline-block; margin-right: 1.2em; } .sw { display: inline-block; width: 1em; height: .6em; margin-right: .3em; }
</style>
</head>
<body>
<h1>vram run: <code>%s</code></h1>
`, e(strings.Join(r.Args, " ")), e(strings.Join(r.Args, " ")))

	// Summary.
	bw.WriteString("<table>\n")
	row := func(k, v string) { fmt.Fprintf(bw, "<tr><th>%s</th><td>%s</td></tr>\n", e(k), v) }
	status := fmt.Sprintf("exit status %d", r.ExitCode)
	if r.Signal != 0 {
		status = fmt.Sprintf("killed by %s (status %d)", SignalName(r.Signal), r.ExitCode)
	}
	row("job", e(fmt.Sprintf("%s after %s, started %s", status, round(r.Duration), r.Start.Format(time.RFC3339))))
	if !r.Memory {
		row("memory", e("unavailable: "+orUnknown(r.MemoryNote)))
	} else if r.Peak.Bytes > 0 {
		d := r.Devices[r.Peak.Device]
		row("peak", e(fmt.Sprintf("%s at %s on GPU %d (%s), pid %d %s", units.FormatBytes(r.Peak.Bytes), round(r.Peak.At), d.Index, d.Name, r.Peak.PID, r.Peak.Command)))
		if r.SteadyKnown {
			row("steady state", e(units.FormatBytes(r.Steady)+" (median floor after warm-up)"))
		}
		cls := "ok"
		if r.Leak.Kind == detect.Leak {
			cls = "bad"
		}
		row("leak", fmt.Sprintf(`<span class="%s">%s</span>`, cls, e(fmt.Sprintf("%s (confidence %.3f)", r.Leak.Reason, r.Leak.Confidence))))
	}
	switch o := r.OOM; {
	case o.Cause == CauseLimit:
		row("limit", `<span class="bad">`+e(o.Explanation)+"</span>")
	case o.Detected:
		row("OOM", fmt.Sprintf(`<span class="bad">%s: %s</span><br/>%s<br/><code>%s</code>`,
			e(o.Cause), e(o.Explanation), e("advice: "+o.Advice), e(o.Message.Text)))
	case o.Caught:
		row("OOM", e(o.Explanation))
	default:
		row("OOM", `<span class="ok">none</span>`)
	}
	bw.WriteString("</table>\n")

	if r.Memory && len(r.Samples) > 0 {
		used := r.UsedDevices()
		if len(used) == 0 {
			used = []int{0}
		}
		for _, d := range used {
			dev := r.Devices[d]
			fmt.Fprintf(bw, "<h2>GPU %d (%s): memory over time</h2>\n", dev.Index, e(dev.Name))
			c := newChart(r.Duration, float64(dev.Total))
			var job, all []Point
			for _, s := range r.Samples {
				job = append(job, Point{s.T, s.JobDev[d]})
				all = append(all, Point{s.T, s.Used[d]})
			}
			c.hline(float64(dev.Total), "#999", "total "+units.FormatBytes(dev.Total))
			if r.Limit.Limit.Set() {
				c.hline(float64(r.Limit.Limit.On(dev)), "#d60", "limit "+units.FormatBytes(r.Limit.Limit.On(dev)))
			}
			c.series(all, "#bbb", "device used (all processes)")
			c.series(job, "#1565c0", "the job")
			if r.Peak.Device == d {
				c.point(r.Peak.At, float64(r.Peak.Bytes), "#c00", "peak "+units.FormatBytes(r.Peak.Bytes))
			}
			if r.Leak.Kind == detect.Leak && len(used) == 1 {
				end := r.Samples[len(r.Samples)-1].T
				for i := len(r.Samples) - 1; i > 0 && r.Samples[i].Job == 0; i-- {
					end = r.Samples[i-1].T
				}
				x0 := end - r.Leak.Horizon
				y1 := float64(r.Leak.Floor)
				y0 := y1 - r.Leak.Slope*r.Leak.Horizon.Seconds()
				c.segment(x0, y0, end, y1, "#c00", fmt.Sprintf("leak %.1f MiB/min", r.Leak.MiBPerMin()))
			}
			if o := r.OOM; o.Detected && o.Message != nil {
				c.vline(o.Message.At, "#c00", "OOM ("+o.Cause+")")
			}
			if r.Limit.Hit && r.Limit.Device == d {
				c.vline(r.Limit.At, "#d60", "limit reached")
			}
			c.write(bw)
		}
		if a := r.Allocator; a != nil {
			bw.WriteString("<h2>vram's allocator inside the job: allocated and reserved</h2>\n")
			c := newChart(r.Duration, float64(max(r.Peak.Bytes, a.PeakReserved)))
			var job, alloc, res []Point
			for _, s := range r.Samples {
				job = append(job, Point{s.T, s.Job})
				if s.AllocKnown {
					alloc = append(alloc, Point{s.T, s.Allocated})
					res = append(res, Point{s.T, s.Reserved})
				}
			}
			c.series(job, "#bbb", "the job, as the driver counts it (reserved + CUDA contexts)")
			c.series(res, "#ef6c00", "reserved by vram's allocator (peak "+units.FormatBytes(a.PeakReserved)+")")
			c.series(alloc, "#2e7d32", "allocated (peak "+units.FormatBytes(a.PeakAllocated)+")")
			c.write(bw)
		}
		if len(r.Procs) > 0 {
			bw.WriteString("<h2>Memory per process of the job</h2>\n")
			top := float64(r.Peak.Bytes)
			for _, p := range r.Procs {
				top = max(top, float64(p.Peak))
			}
			c := newChart(r.Duration, top)
			for i, p := range r.Procs {
				if i >= len(palette) {
					break
				}
				c.series(p.Series, palette[i], fmt.Sprintf("pid %d %s (peak %s)", p.PID, p.Command, units.FormatBytes(p.Peak)))
			}
			c.write(bw)
		}
	}
	if len(r.Others) > 0 {
		bw.WriteString("<h2>Other processes on the job's GPUs</h2>\n<table>\n<tr><th>pid</th><th>command</th><th>peak</th><th>when the job ended</th></tr>\n")
		for _, o := range r.Others {
			fmt.Fprintf(bw, "<tr><td>%d</td><td>%s</td><td>%s</td><td>%s</td></tr>\n", o.PID, e(o.Command), units.FormatBytes(o.Peak), units.FormatBytes(o.AtEnd))
		}
		bw.WriteString("</table>\n")
	}
	if len(r.Warnings) > 0 {
		bw.WriteString("<h2>Warnings</h2>\n<ul>\n")
		for _, wn := range r.Warnings {
			fmt.Fprintf(bw, "<li>%s</li>\n", e(wn))
		}
		bw.WriteString("</ul>\n")
	}
	bw.WriteString("</body>\n</html>\n")
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("write HTML report: %w", err)
	}
	return nil
}

var palette = []string{"#1565c0", "#2e7d32", "#6a1b9a", "#ef6c00", "#00838f", "#ad1457", "#4e342e", "#546e7a"}

// chart draws time series into an SVG of fixed size.
type chart struct {
	span   time.Duration
	top    float64
	b      strings.Builder
	legend []string
}

const (
	chartW, chartH         = 1000, 320
	padL, padR, padT, padB = 70, 20, 20, 30
	maxPoints              = 2000 // per series; more are reduced to per-column maxima
)

func newChart(span time.Duration, top float64) *chart {
	if span <= 0 {
		span = time.Second
	}
	if top <= 0 {
		top = 1
	}
	return &chart{span: span, top: top * 1.05}
}

func (c *chart) x(t time.Duration) float64 {
	return padL + float64(t)/float64(c.span)*(chartW-padL-padR)
}

func (c *chart) y(v float64) float64 {
	v = max(0, min(v, c.top))
	return chartH - padB - v/c.top*(chartH-padT-padB)
}

func (c *chart) addLegend(color, label string) {
	c.legend = append(c.legend, fmt.Sprintf(`<span><span class="sw" style="background:%s"></span>%s</span>`, color, html.EscapeString(label)))
}

func (c *chart) series(pts []Point, color, label string) {
	if len(pts) == 0 {
		return
	}
	if len(pts) > maxPoints {
		red := make([]Point, 0, maxPoints)
		per := (len(pts) + maxPoints - 1) / maxPoints
		for i := 0; i < len(pts); i += per {
			m := pts[i]
			for _, p := range pts[i:min(i+per, len(pts))] {
				if p.Bytes > m.Bytes {
					m.Bytes = p.Bytes
				}
			}
			red = append(red, m)
		}
		pts = red
	}
	fmt.Fprintf(&c.b, `<polyline fill="none" stroke="%s" stroke-width="1.5" points="`, color)
	for i, p := range pts {
		if i > 0 {
			c.b.WriteByte(' ')
		}
		fmt.Fprintf(&c.b, "%.1f,%.1f", c.x(p.T), c.y(float64(p.Bytes)))
	}
	c.b.WriteString(`"/>` + "\n")
	c.addLegend(color, label)
}

func (c *chart) hline(v float64, color, label string) {
	fmt.Fprintf(&c.b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="%s" stroke-dasharray="4 3"/>`+"\n", padL, chartW-padR, c.y(v), c.y(v), color)
	fmt.Fprintf(&c.b, `<text class="lbl" x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", chartW-padR-4, c.y(v)-3, html.EscapeString(label))
}

func (c *chart) vline(t time.Duration, color, label string) {
	fmt.Fprintf(&c.b, `<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="%s" stroke-width="1.5"/>`+"\n", c.x(t), c.x(t), padT, chartH-padB, color)
	fmt.Fprintf(&c.b, `<text class="lbl" x="%.1f" y="%d" text-anchor="end">%s</text>`+"\n", c.x(t)-4, padT+12, html.EscapeString(label))
	c.addLegend(color, label)
}

func (c *chart) point(t time.Duration, v float64, color, label string) {
	fmt.Fprintf(&c.b, `<circle cx="%.1f" cy="%.1f" r="4" fill="%s"/>`+"\n", c.x(t), c.y(v), color)
	fmt.Fprintf(&c.b, `<text class="lbl" x="%.1f" y="%.1f">%s</text>`+"\n", c.x(t)+6, c.y(v)-6, html.EscapeString(label))
}

func (c *chart) segment(t0 time.Duration, v0 float64, t1 time.Duration, v1 float64, color, label string) {
	fmt.Fprintf(&c.b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="2" stroke-dasharray="6 3"/>`+"\n",
		c.x(max(0, t0)), c.y(v0), c.x(t1), c.y(v1), color)
	c.addLegend(color, label)
}

func (c *chart) write(w io.Writer) {
	fmt.Fprintf(w, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" role="img">`+"\n", chartW, chartH, chartW, chartH)
	// Axes and grid: four horizontal lines, five time ticks.
	for i := 0; i <= 4; i++ {
		v := c.top / 1.05 * float64(i) / 4
		fmt.Fprintf(w, `<line class="grid" x1="%d" x2="%d" y1="%.1f" y2="%.1f"/>`+"\n", padL, chartW-padR, c.y(v), c.y(v))
		fmt.Fprintf(w, `<text class="lbl" x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", padL-4, c.y(v)+4, html.EscapeString(units.FormatBytes(uint64(v))))
	}
	for i := 0; i <= 5; i++ {
		t := c.span * time.Duration(i) / 5
		fmt.Fprintf(w, `<text class="lbl" x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", c.x(t), chartH-padB+16, html.EscapeString(round(t).String()))
	}
	fmt.Fprintf(w, `<line class="axis" x1="%d" x2="%d" y1="%d" y2="%d"/>`+"\n", padL, chartW-padR, chartH-padB, chartH-padB)
	fmt.Fprintf(w, `<line class="axis" x1="%d" x2="%d" y1="%d" y2="%d"/>`+"\n", padL, padL, padT, chartH-padB)
	io.WriteString(w, c.b.String())
	io.WriteString(w, "</svg>\n")
	fmt.Fprintf(w, `<p class="legend">%s</p>`+"\n", strings.Join(c.legend, ""))
}
