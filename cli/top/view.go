package top

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	tea "charm.land/bubbletea/v2"
	"charm.land/lipgloss/v2"
	"github.com/charmbracelet/x/ansi"

	"github.com/vramhq/vram/gpu"
	"github.com/vramhq/vram/internal/units"
)

// Smallest terminal the layout works in; below it the view says so.
const (
	minWidth  = 60
	minHeight = 12
)

// Styles use the 16 basic ANSI colours plus bold, faint and reverse, which
// every terminal and SSH session renders; Bubble Tea downsamples further
// when the terminal has no colour.
var (
	stBold    = lipgloss.NewStyle().Bold(true)
	stFaint   = lipgloss.NewStyle().Faint(true)
	stRev     = lipgloss.NewStyle().Reverse(true)
	stSim     = lipgloss.NewStyle().Reverse(true).Bold(true).Foreground(lipgloss.Color("3"))
	stRed     = lipgloss.NewStyle().Foreground(lipgloss.Color("1"))
	stGreen   = lipgloss.NewStyle().Foreground(lipgloss.Color("2"))
	stYellow  = lipgloss.NewStyle().Foreground(lipgloss.Color("3"))
	stCyan    = lipgloss.NewStyle().Foreground(lipgloss.Color("6"))
	stHeading = lipgloss.NewStyle().Bold(true).Reverse(true)
)

// View renders the state.
func (m Model) View() tea.View {
	v := tea.NewView(m.render())
	v.AltScreen = true
	v.WindowTitle = "vram top"
	return v
}

// render returns the frame as lines joined with newlines, each at most
// m.width cells wide and at most m.height lines.
func (m Model) render() string {
	if m.width < minWidth || m.height < m.minHeight() {
		return m.tooSmall()
	}
	var lines []string
	switch {
	case m.help:
		lines = m.helpLines()
	case m.screen == screenDetail:
		lines = m.detailLines()
	default:
		lines = m.mainLines()
	}
	if m.confirm != nil {
		lines = overlay(lines, m.confirmBox(), m.width)
	}
	if len(lines) > m.height {
		lines = lines[:m.height]
	}
	for i, l := range lines {
		lines[i] = ansi.Truncate(l, m.width, "")
	}
	return strings.Join(lines, "\n")
}

func (m Model) devices() int {
	if m.snap == nil {
		return 1
	}
	return max(1, len(m.snap.Devices))
}

// minHeight grows with the number of GPUs: each needs its bar line.
func (m Model) minHeight() int { return max(minHeight, 7+m.devices()) }

func (m Model) tooSmall() string {
	msg := fmt.Sprintf("terminal too small: %d×%d; vram top needs at least %d×%d (q quits)", m.width, m.height, minWidth, m.minHeight())
	w := max(m.width, 1)
	lines := strings.Split(ansi.Hardwrap(msg, w, true), "\n")
	if len(lines) > max(m.height, 1) {
		lines = lines[:max(m.height, 1)]
	}
	return strings.Join(lines, "\n")
}

// layout splits the height: header, note, per GPU a bar and graphH graph
// rows, a blank line, the table header, rows table rows, the status line.
func (m Model) layout() (graphH, rows int) {
	fixed := 1 + m.noteLines() + 1 + 1 + 1 // header, note, blank, table header, status
	n := m.devices()
	avail := m.height - fixed - n - 5 // keep at least 5 table rows
	graphH = min(max(avail/n, 0), 4)
	rows = m.height - fixed - n*(1+graphH)
	return graphH, max(rows, 1)
}

func (m Model) tableRows() int { _, r := m.layout(); return r }

func (m Model) noteLines() int {
	if m.noteText() == "" {
		return 0
	}
	return 1
}

func (m Model) noteText() string {
	var parts []string
	if m.cfg.Note != "" {
		parts = append(parts, m.cfg.Note)
	}
	if m.snap != nil {
		parts = append(parts, m.snap.Warnings...)
	}
	return strings.Join(parts, " · ")
}

func (m Model) header(title string) string {
	left := title
	if m.snap != nil {
		h := m.snap.Host
		if m.cfg.Hostname != "" {
			left += " · " + m.cfg.Hostname
		}
		if !h.Simulated && h.Driver != "" {
			left += " · driver " + h.Driver
		}
		if h.CUDA != "" {
			left += " · CUDA " + h.CUDA
		}
		left += " · every " + m.cfg.Interval.String() + " · " + m.snap.Time.Format("15:04:05")
	}
	left = stBold.Render(left)
	right := ""
	if m.snap != nil && m.snap.Host.Simulated {
		right = stSim.Render(fmt.Sprintf(" SIMULATED seed %d ", m.snap.Host.SimSeed))
	}
	return spread(left, right, m.width)
}

// spread puts right at the right edge of a line of width w, after left
// (truncated if they do not fit).
func spread(left, right string, w int) string {
	gap := w - ansi.StringWidth(left) - ansi.StringWidth(right)
	if gap < 1 {
		left = ansi.Truncate(left, max(w-ansi.StringWidth(right)-1, 0), "…")
		gap = max(w-ansi.StringWidth(left)-ansi.StringWidth(right), 0)
	}
	return left + strings.Repeat(" ", gap) + right
}

func (m Model) mainLines() []string {
	lines := []string{m.header("vram top")}
	if n := m.noteText(); n != "" {
		lines = append(lines, stYellow.Render(n))
	}
	if m.snap == nil {
		lines = append(lines, "")
		if m.lastErr != nil {
			lines = append(lines, stRed.Render("sampling failed: "+m.lastErr.Error()))
		} else {
			lines = append(lines, "waiting for the first sample…")
		}
		return m.fill(lines, m.statusLine(0))
	}
	graphH, nrows := m.layout()
	for _, d := range m.snap.Devices {
		lines = append(lines, m.deviceLine(d))
		if graphH > 0 {
			var pts []point
			if s := m.hist.dev[d.Index]; s != nil {
				pts = s.window()
			}
			lines = append(lines, graphLines(pts, m.hist.cap, d.Memory.Total, m.width, graphH, "100%", "0%")...)
		}
	}
	lines = append(lines, "")
	rows := m.rows()
	cols := columnsFor(m.width)
	for _, p := range m.snap.Processes {
		cols.alloc = cols.alloc || p.Alloc != nil
	}
	lines = append(lines, stHeading.Render(padRight(m.tableHeader(cols), m.width)))
	sel := m.selected(rows)
	start := 0
	if sel >= nrows {
		start = sel - nrows + 1
	}
	for i := start; i < len(rows) && i < start+nrows; i++ {
		lines = append(lines, m.rowLine(rows[i], cols, i == sel))
	}
	if len(rows) == 0 {
		if m.filter != "" {
			lines = append(lines, stFaint.Render(fmt.Sprintf("  no process matches %q (Esc clears the filter)", m.filter)))
		} else {
			lines = append(lines, stFaint.Render("  no processes on the shown GPUs"))
		}
	}
	return m.fill(lines, m.statusLine(len(rows)))
}

// fill pads lines to the full height and puts last on the bottom line.
func (m Model) fill(lines []string, last string) []string {
	for len(lines) < m.height-1 {
		lines = append(lines, "")
	}
	if len(lines) > m.height-1 {
		lines = lines[:m.height-1]
	}
	return append(lines, last)
}

func (m Model) deviceLine(d gpu.DeviceState) string {
	label := fmt.Sprintf("GPU %-2d %-14s ", d.Index, clip(d.Name, 14))
	if d.Err != nil {
		return label + stRed.Render("error: "+d.Err.Error())
	}
	mem := d.Memory
	stats := fmt.Sprintf(" %s / %s used", gib(mem.Used), gib(mem.Total))
	if mem.ReservedKnown {
		stats += fmt.Sprintf(" · %s rsvd", gib(mem.Reserved))
	}
	stats += fmt.Sprintf(" · %s free", gib(mem.Free))
	if d.Utilization.Known {
		stats += fmt.Sprintf(" · util %3d%%", d.Utilization.GPU)
	}
	barW := m.width - ansi.StringWidth(label) - ansi.StringWidth(stats) - 2
	if barW < 10 { // narrow: drop the free and utilization figures
		stats = fmt.Sprintf(" %s/%s", gibShort(mem.Used), gibShort(mem.Total))
		barW = m.width - ansi.StringWidth(label) - ansi.StringWidth(stats) - 2
	}
	return label + "[" + memBar(mem, max(barW, 1)) + "]" + stats
}

// memBar draws used (█, coloured by how full the device is), reserved (▒)
// and free (░) memory in w cells.
func memBar(mem gpu.Memory, w int) string {
	if mem.Total == 0 {
		return strings.Repeat("?", w)
	}
	used := int(float64(w)*float64(mem.Used)/float64(mem.Total) + 0.5)
	if mem.Used > 0 && used == 0 {
		used = 1
	}
	rsvd := 0
	if mem.ReservedKnown {
		rsvd = int(float64(w)*float64(mem.Reserved)/float64(mem.Total) + 0.5)
		if mem.Reserved > 0 && rsvd == 0 {
			rsvd = 1
		}
	}
	used = min(used, w)
	rsvd = min(rsvd, w-used)
	st := stGreen
	switch frac := float64(mem.Used) / float64(mem.Total); {
	case frac >= 0.9:
		st = stRed
	case frac >= 0.7:
		st = stYellow
	}
	return st.Render(strings.Repeat("█", used)) + stFaint.Render(strings.Repeat("▒", rsvd)) + stFaint.Render(strings.Repeat("░", w-used-rsvd))
}

// graphLines draws pts as a filled braille area graph, height rows of four
// dots, y from 0 to ymax, in width cells minus a 6-cell gutter labelled
// top and bottom. Each cell holds two samples side by side.
func graphLines(pts []point, capacity int, ymax uint64, width, height int, top, bottom string) []string {
	const gutter = 6
	cells := max(width-gutter, 1)
	vals, ok := resample(pts, capacity, 2*cells)
	levels := 4 * height
	lvl := make([]int, len(vals))
	for i, v := range vals {
		if !ok[i] {
			lvl[i] = -1
			continue
		}
		if ymax == 0 {
			continue
		}
		l := int(float64(v)/float64(ymax)*float64(levels) + 0.5)
		if v > 0 && l == 0 {
			l = 1 // visible, however small
		}
		lvl[i] = min(l, levels)
	}
	// Braille dot bits, bottom to top: left column 7,3,2,1; right 8,6,5,4.
	leftBits := [4]rune{0x40, 0x04, 0x02, 0x01}
	rightBits := [4]rune{0x80, 0x20, 0x10, 0x08}
	out := make([]string, height)
	for r := 0; r < height; r++ {
		base := (height - 1 - r) * 4 // dot levels below this row
		var b strings.Builder
		for c := 0; c < cells; c++ {
			ch := rune(0x2800)
			for d := 0; d < 4; d++ {
				if lvl[2*c] > base+d {
					ch |= leftBits[d]
				}
				if lvl[2*c+1] > base+d {
					ch |= rightBits[d]
				}
			}
			if lvl[2*c] < 0 && lvl[2*c+1] < 0 {
				ch = ' ' // before the history starts
			}
			b.WriteRune(ch)
		}
		g := ""
		switch r {
		case 0:
			g = top
		case height - 1:
			g = bottom
		}
		if height == 1 {
			g = top
		}
		out[r] = stFaint.Render(fmt.Sprintf("%*s ", gutter-1, clip(g, gutter-1))) + stCyan.Render(b.String())
	}
	return out
}

// sparkline draws pts in w cells with block characters, scaled between the
// window's minimum and maximum so that the shape shows; a flat series is a
// flat line at the bottom.
func sparkline(pts []point, capacity, w int) string {
	vals, ok := resample(pts, capacity, w)
	lo, hi, seen := uint64(0), uint64(0), false
	for i, v := range vals {
		if !ok[i] {
			continue
		}
		if !seen || v < lo {
			lo = v
		}
		if !seen || v > hi {
			hi = v
		}
		seen = true
	}
	blocks := []rune("▁▂▃▄▅▆▇█")
	var b strings.Builder
	for i, v := range vals {
		switch {
		case !ok[i]:
			b.WriteRune(' ')
		case hi == lo:
			b.WriteRune(blocks[0])
		default:
			b.WriteRune(blocks[int(float64(v-lo)/float64(hi-lo)*float64(len(blocks)-1)+0.5)])
		}
	}
	return b.String()
}

// Table columns. Narrow terminals drop the sparkline first, then the
// growth rate, then the user.
// alloc (ALLOC, RSVD, FRAG: vram's allocator inside the process) is shown
// when some process runs it.
type columns struct{ spark, growth, user, alloc bool }

func columnsFor(w int) columns {
	return columns{spark: w >= 110, growth: w >= 90, user: w >= 75}
}

const (
	sparkW = 12
	flagsW = 16
)

func (m Model) tableHeader(c columns) string {
	arrow := func(k sortKey, name string) string {
		if m.sortBy != k {
			return name
		}
		if m.ascending {
			return name + "▲"
		}
		return name + "▼"
	}
	h := fmt.Sprintf("  %7s", arrow(sortPID, "PID"))
	if c.user {
		h += fmt.Sprintf(" %-10s", arrow(sortUser, "USER"))
	}
	h += fmt.Sprintf(" %3s %9s", "GPU", arrow(sortMemory, "MEM"))
	if c.alloc {
		h += fmt.Sprintf(" %9s %9s %4s", "ALLOC", "RSVD", "FRAG")
	}
	if c.spark {
		h += fmt.Sprintf(" %-*s", sparkW, "HISTORY")
	}
	if c.growth {
		h += fmt.Sprintf(" %9s", arrow(sortGrowth, "MiB/min"))
	}
	h += fmt.Sprintf(" %-*s %s", flagsW, "FLAGS", "COMMAND")
	return h
}

func (m Model) rowLine(r row, c columns, selected bool) string {
	p := r.p
	mark := "  "
	if selected {
		mark = "▶ "
	}
	var b strings.Builder
	b.WriteString(mark)
	fmt.Fprintf(&b, "%7d", p.PID)
	if c.user {
		u := gpu.Printable(p.User)
		if u == "" {
			u = "-"
		}
		fmt.Fprintf(&b, " %-10s", clip(u, 10))
	}
	mem := "n/a"
	if p.MemoryKnown {
		mem = gib(p.Memory)
	}
	fmt.Fprintf(&b, " %3d %9s", p.Device, mem)
	if c.alloc {
		if a := p.Alloc; a != nil {
			fmt.Fprintf(&b, " %9s %9s %3.0f%%", gib(uint64(a.Allocated)), gib(uint64(a.Reserved)), 100*a.Fragmentation())
		} else {
			fmt.Fprintf(&b, " %9s %9s %4s", "-", "-", "-")
		}
	}
	plain := b.String()
	var rest strings.Builder
	if c.spark {
		rest.WriteString(" " + stCyan.Render(sparkline(r.hist, m.hist.cap, sparkW)))
	}
	if c.growth {
		g := "–"
		if r.growthOK {
			g = fmt.Sprintf("%+.1f", mibPerMin(r.growth))
			if g == "+0.0" || g == "-0.0" {
				g = "0.0"
			}
		}
		st := lipgloss.NewStyle()
		if r.growthOK && mibPerMin(r.growth) >= 1 {
			st = stYellow
		}
		rest.WriteString(" " + st.Render(fmt.Sprintf("%9s", g)))
	}
	rest.WriteString(" " + flagCell(p.Flags, flagsW))
	used := ansi.StringWidth(plain) + ansi.StringWidth(rest.String()) + 1
	cmd := p.DisplayCommand()
	if cmd == "" {
		cmd = "(not visible in /proc)"
	}
	rest.WriteString(" " + clip(cmd, max(m.width-used, 1)))
	line := plain + rest.String()
	if selected {
		return stRev.Render(padRight(ansi.Strip(line), m.width))
	}
	return line
}

// shortFlag names a flag in the table; the detail screen uses the full names.
var shortFlag = []struct {
	f    gpu.Flags
	name string
	st   lipgloss.Style
}{
	{gpu.FlagNoSuchProcess, "no-proc", stRed},
	{gpu.FlagZombie, "zombie", stRed},
	{gpu.FlagOrphaned, "orphan", stYellow},
	{gpu.FlagIdle, "idle", stYellow},
	{gpu.FlagJupyter, "jupyter", stCyan},
	{gpu.FlagNoPermission, "no-perm", stFaint},
}

func flagCell(f gpu.Flags, w int) string {
	var parts, plain []string
	for _, s := range shortFlag {
		if f&s.f != 0 {
			parts = append(parts, s.st.Render(s.name))
			plain = append(plain, s.name)
		}
	}
	text := strings.Join(plain, ",")
	if ansi.StringWidth(text) > w {
		return clip(text, w)
	}
	return strings.Join(parts, ",") + strings.Repeat(" ", w-ansi.StringWidth(text))
}

// statusLine is the bottom line of the main screen; shown is the number
// of rows that pass the filter.
func (m Model) statusLine(shown int) string {
	right := "? help · q quit"
	var left string
	switch {
	case m.filtering:
		left = "/" + m.filter + "█  (Enter keeps, Esc clears)"
	case m.status != "":
		left = m.status
		if m.statusBad {
			left = stRed.Render(left)
		}
	case m.lastErr != nil && m.snap != nil:
		left = stRed.Render("last sample failed: " + m.lastErr.Error())
	default:
		total := 0
		if m.snap != nil {
			total = len(m.snap.Processes)
		}
		long, short := m.windowLabels()
		left = fmt.Sprintf("sort: %s · %d/%d processes · %s", m.sortLabel(), shown, total, long)
		if ansi.StringWidth(left)+ansi.StringWidth(right) >= m.width {
			left = fmt.Sprintf("sort: %s · %d/%d processes · %s", m.sortLabel(), shown, total, short)
		}
		if m.filter != "" {
			left += fmt.Sprintf(" · filter %q", m.filter)
		}
		if m.cfg.ReadOnly {
			left += " · read-only"
		}
	}
	return spread(left, stFaint.Render(right), m.width)
}

// windowLabels say what the graphs span, in a long and a short form. When
// --window asked for more samples than the history keeps (a short
// interval) or for fewer than a growth rate needs, the window is not what
// was asked, and both forms say so.
func (m Model) windowLabels() (long, short string) {
	span := "window " + m.windowSpan()
	asked := m.cfg.AskedWindow
	if asked <= 0 || m.cfg.Interval <= 0 {
		return span, span
	}
	n := int(asked / m.cfg.Interval)
	var why string
	switch {
	case n > m.cfg.Window:
		why = fmt.Sprintf("at most %d samples", m.cfg.Window)
	case n < m.cfg.Window:
		why = fmt.Sprintf("at least %d samples", m.cfg.Window)
	default:
		return span, span
	}
	return fmt.Sprintf("%s (%v asked; %s)", span, asked, why), fmt.Sprintf("%s (%v asked)", span, asked)
}

func (m Model) sortLabel() string {
	if m.ascending {
		return m.sortBy.String() + " ▲"
	}
	return m.sortBy.String() + " ▼"
}

// windowSpan is the time the graphs span: Window samples at Interval.
func (m Model) windowSpan() string {
	return (time.Duration(m.cfg.Window) * m.cfg.Interval).Round(time.Millisecond).String()
}

func (m Model) helpLines() []string {
	sig := "t  SIGTERM the process (asks first)\nk  SIGKILL the process (asks first)"
	if m.cfg.ReadOnly {
		sig = "t  SIGTERM: disabled (--read-only)\nk  SIGKILL: disabled (--read-only)"
	}
	text := `↑ ↓ PgUp PgDn Home End   move the selection
Enter    details of the selected process (Esc goes back)
m p g u  sort by memory, PID, growth, user (again: reverse)
/        filter by PID, user, command, flag or container (Esc clears)
` + sig + `
?        this help (any key closes it)
q Ctrl-C quit

Bar:     █ used  ▒ reserved by the driver  ░ free
Graph:   used memory of the GPU over the window, 0-100 % of its memory
HISTORY: the process's memory over the window, scaled to its own range
MiB/min: growth over the window: Theil-Sen slope of per-interval minima
Flags:   no-proc  listed by the driver, absent from /proc
         zombie   exiting, or a zombie still holding memory
         orphan   its parent or launching session is gone
         idle     no GPU activity over --idle-window (30 s by default)
         jupyter  a Jupyter kernel
         no-perm  /proc refused to show it`
	lines := []string{m.header("vram top · help"), ""}
	for _, l := range strings.Split(text, "\n") {
		lines = append(lines, "  "+l)
	}
	return m.fill(lines, stFaint.Render("any key closes the help"))
}

func (m Model) detailLines() []string {
	p, ok := m.find(m.detail)
	lines := []string{m.header(fmt.Sprintf("vram top · PID %d", m.detail.pid)), ""}
	back := "Esc back · t SIGTERM · k SIGKILL · ? help · q quit"
	if m.cfg.ReadOnly {
		back = "Esc back · read-only: t/k disabled · ? help · q quit"
	}
	last := spread(m.status, stFaint.Render(back), m.width)
	if m.status != "" && m.statusBad {
		last = spread(stRed.Render(m.status), stFaint.Render(back), m.width)
	}
	if !ok {
		lines = append(lines, stYellow.Render(fmt.Sprintf("PID %d is no longer listed on GPU %d: it exited or released its memory.", m.detail.pid, m.detail.dev)))
		return m.fill(lines, last)
	}
	const lw = 11
	field := func(name, val string) {
		w := max(m.width-lw, 10)
		for i, l := range strings.Split(ansi.Hardwrap(val, w, true), "\n") {
			if i == 0 {
				lines = append(lines, stBold.Render(fmt.Sprintf("%-*s", lw, name))+l)
			} else {
				lines = append(lines, strings.Repeat(" ", lw)+l)
			}
		}
	}
	cmd := gpu.Printable(strings.Join(p.Cmdline, " "))
	if cmd == "" {
		cmd = p.DisplayCommand() + " (no command line)"
	}
	field("Command", cmd)
	user := "-"
	if p.User != "" {
		user = fmt.Sprintf("%s (uid %d)", gpu.Printable(p.User), p.UID)
	}
	field("User", user)
	flags := p.Flags.String()
	if flags == "" {
		flags = "none"
	}
	state := p.State
	if state == "" {
		state = "-"
	}
	field("State", fmt.Sprintf("%s · flags: %s · %s", state, flags, p.Kind))
	if p.StartTime.IsZero() {
		field("Started", "unknown (not in /proc)")
	} else {
		field("Started", fmt.Sprintf("%s (%s ago)", p.StartTime.Format(time.DateTime), m.snap.Time.Sub(p.StartTime).Round(time.Second)))
	}
	field("Parent", parentText(p.PPID))
	cg := gpu.Printable(p.Cgroup)
	if cg == "" {
		cg = "-"
	}
	field("Cgroup", cg)
	field("Container", containerText(p.Container))
	lines = append(lines, "", stBold.Render("GPU memory"))
	for _, q := range m.snap.Processes {
		if q.PID != p.PID || !q.StartTime.Equal(p.StartTime) {
			continue
		}
		g := "growth –"
		if ph := m.hist.proc[procKey{q.Device, q.PID}]; ph != nil {
			if s, ok := growth(ph.mem.window()); ok {
				g = fmt.Sprintf("growth %+.1f MiB/min", mibPerMin(s))
			}
		}
		util := ""
		if q.UtilKnown {
			util = fmt.Sprintf(" · SM %d%% · mem %d%%", q.SM, q.MemUtil)
		}
		name := ""
		for _, d := range m.snap.Devices {
			if d.Index == q.Device {
				name = d.Name
			}
		}
		mem := "n/a"
		if q.MemoryKnown {
			mem = gib(q.Memory)
		}
		lines = append(lines, fmt.Sprintf("  GPU %d %s: %s%s · %s", q.Device, name, mem, util, g))
		if a := q.Alloc; a != nil {
			lines = append(lines, fmt.Sprintf("    vram allocator: allocated %s (peak %s) · reserved %s (peak %s) · largest free block %s · fragmentation %.0f%% · OOMs %d · retries %d",
				gib(uint64(a.Allocated)), gib(uint64(a.AllocatedPeak)), gib(uint64(a.Reserved)), gib(uint64(a.ReservedPeak)),
				gib(uint64(a.LargestFree)), 100*a.Fragmentation(), a.NumOOMs, a.NumAllocRetries))
		}
	}
	var pts []point
	if ph := m.hist.proc[m.detail]; ph != nil {
		pts = ph.mem.window()
	}
	var peak uint64
	for _, x := range pts {
		peak = max(peak, x.v)
	}
	lines = append(lines, "", stBold.Render(fmt.Sprintf("Memory on GPU %d over the last %s (peak %s)", m.detail.dev, m.windowSpan(), gib(peak))))
	h := min(max(m.height-len(lines)-2, 1), 8)
	lines = append(lines, graphLines(pts, m.hist.cap, peak, m.width, h, gibShort(peak), "0")...)
	return m.fill(lines, last)
}

func parentText(ppid int) string {
	switch ppid {
	case 0:
		return "-"
	case 1:
		return "1 (init: the process was re-parented or started by the service manager)"
	}
	return strconv.Itoa(ppid)
}

func containerText(c gpu.Container) string {
	if c.Runtime == "" && c.ID == "" && c.PodUID == "" {
		return "none (not in a known container cgroup)"
	}
	s := c.Runtime
	if c.ID != "" {
		s += " " + c.ID[:min(12, len(c.ID))]
	}
	if c.PodUID != "" {
		s += " · pod " + c.PodUID
	}
	return strings.TrimSpace(s)
}

// confirmBox is the dialog that asks before a signal is sent.
func (m Model) confirmBox() []string {
	c := m.confirm
	name := sigName(c.sig)
	inner := min(max(m.width-8, 40), 76)
	body := []string{
		fmt.Sprintf("PID      %d on GPU %d, holding %s", c.t.PID, c.t.Device, gib(c.t.Memory)),
		"Command  " + clip(c.t.Command, inner-9),
		"Started  " + c.t.Start.Format(time.DateTime),
		"",
		fmt.Sprintf("y: send %s     any other key: cancel", name),
	}
	title := fmt.Sprintf(" Send %s? ", name)
	out := []string{"┌" + title + strings.Repeat("─", inner+2-ansi.StringWidth(title)) + "┐"}
	for _, l := range body {
		out = append(out, "│ "+padRight(clip(l, inner), inner)+" │")
	}
	out = append(out, "└"+strings.Repeat("─", inner+2)+"┘")
	for i := range out {
		out[i] = stBold.Render(out[i])
	}
	return out
}

// overlay draws box over the middle of lines, keeping what is left and
// right of it.
func overlay(lines, box []string, width int) []string {
	bw := ansi.StringWidth(ansi.Strip(box[0]))
	left := max((width-bw)/2, 0)
	top := max((len(lines)-len(box))/2, 0)
	out := append([]string(nil), lines...)
	for len(out) < top+len(box) {
		out = append(out, "")
	}
	for i, b := range box {
		l := padRight(out[top+i], width)
		out[top+i] = ansi.Truncate(l, left, "") + b + ansi.TruncateLeft(l, left+bw, "")
	}
	return out
}

func padRight(s string, w int) string {
	if n := ansi.StringWidth(s); n < w {
		return s + strings.Repeat(" ", w-n)
	}
	return s
}

// clip shortens s to w cells, ending in … when cut.
func clip(s string, w int) string {
	if w <= 0 {
		return ""
	}
	return ansi.Truncate(s, w, "…")
}

// gib and gibShort are the sizes of top's columns and header: "512 MiB",
// "12.3 GiB"; "512M", "12.3G".
var gib, gibShort = units.Compact.Format, units.Short.Format
