package top

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	tea "charm.land/bubbletea/v2"

	"github.com/vramhq/vram/gpu"
	"github.com/vramhq/vram/proc"
)

// Config is what the model needs besides samples. The zero value of a field
// means "absent": no signaller and no identity source disable signals.
type Config struct {
	// Interval is the sample period.
	Interval time.Duration
	// Window is how many samples the history graphs, sparklines and growth
	// rates span.
	Window int
	// AskedWindow is the span that was asked for (--window); when Window
	// samples at Interval do not cover it (the history has a fixed range
	// of lengths), the footer says so. Zero: nothing was asked.
	AskedWindow time.Duration
	// ReadOnly disables t and k.
	ReadOnly bool
	// Hostname is shown in the header.
	Hostname string
	// Self is vram's own PID, never signalled.
	Self int
	// Signaller sends signals; Procs re-reads a process's identity right
	// before. Either nil disables signals.
	Signaller proc.Signaller
	Procs     proc.Stater
	// Note is shown under the header (which GPUs are shown and why).
	Note string
}

// sortKey orders the process table.
type sortKey int

const (
	sortMemory sortKey = iota
	sortPID
	sortGrowth
	sortUser
)

func (k sortKey) String() string {
	return [...]string{"memory", "PID", "growth", "user"}[k]
}

// screen is what the model shows.
type screen int

const (
	screenMain screen = iota
	screenDetail
)

// Messages. sampleMsg carries one full sample (or the error that prevented
// it) and how long taking it took, so that the next poll keeps the period.
type (
	sampleMsg struct {
		snap *gpu.Snapshot
		err  error
		took time.Duration
	}
	pollMsg   struct{}
	signalMsg struct {
		t         target
		sig       syscall.Signal
		err       error
		simulated bool
	}
)

// confirm is a pending signal waiting for the user's yes.
type confirm struct {
	t   target
	sig syscall.Signal
}

// Model is the state of vram top. Update is a pure state transition (all
// I/O happens in the commands it returns) and View a pure rendering of the
// state. The history is shared between copies of a Model: Update must be
// called from one goroutine, as Bubble Tea does.
type Model struct {
	cfg  Config
	poll func() (*gpu.Snapshot, error)
	hist *history

	snap    *gpu.Snapshot
	lastErr error

	width, height int
	screen        screen
	help          bool

	sortBy    sortKey
	ascending bool
	filter    string
	filtering bool

	sel    procKey // the selected row, followed across re-sorts
	selIdx int     // its position, used when the process leaves
	detail procKey // the process the detail screen shows

	confirm   *confirm
	status    string
	statusBad bool
}

// New builds the model. poll takes one full sample; it runs inside a
// command, never in Update.
func New(cfg Config, poll func() (*gpu.Snapshot, error)) Model {
	if cfg.Interval <= 0 {
		cfg.Interval = time.Second
	}
	if cfg.Window < minGrowthPoints {
		cfg.Window = 300
	}
	return Model{cfg: cfg, poll: poll, hist: newHistory(cfg.Window), width: 100, height: 30}
}

// Init starts polling.
func (m Model) Init() tea.Cmd { return m.pollCmd() }

func (m Model) pollCmd() tea.Cmd {
	poll := m.poll
	return func() tea.Msg {
		start := time.Now()
		snap, err := poll()
		return sampleMsg{snap: snap, err: err, took: time.Since(start)}
	}
}

// Update handles one message.
func (m Model) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case sampleMsg:
		if msg.err != nil {
			m.lastErr = msg.err
		} else if msg.snap != nil {
			m.lastErr = nil
			m.snap = msg.snap
			m.hist.add(msg.snap)
			m.keepSelection()
		}
		delay := m.cfg.Interval - msg.took
		if delay <= 0 {
			return m, m.pollCmd()
		}
		return m, tea.Tick(delay, func(time.Time) tea.Msg { return pollMsg{} })
	case pollMsg:
		return m, m.pollCmd()
	case tea.WindowSizeMsg:
		m.width, m.height = msg.Width, msg.Height
		return m, nil
	case signalMsg:
		m.status, m.statusBad = signalStatus(msg), msg.err != nil
		return m, nil
	case tea.InterruptMsg:
		return m, tea.Quit
	case tea.KeyPressMsg:
		return m.key(msg)
	}
	return m, nil
}

func signalStatus(msg signalMsg) string {
	name := sigName(msg.sig)
	switch {
	case msg.err != nil:
		// One line: the status line is one line of the frame.
		return strings.Join(strings.Fields(msg.err.Error()), " ")
	case msg.simulated:
		return fmt.Sprintf("simulated host: %s to PID %d recorded; no real process was signalled", name, msg.t.PID)
	}
	return fmt.Sprintf("sent %s to PID %d (%s)", name, msg.t.PID, clip(msg.t.Command, 40))
}

func (m Model) key(msg tea.KeyPressMsg) (tea.Model, tea.Cmd) {
	k := msg.String()
	if k == "ctrl+c" {
		return m, tea.Quit
	}
	switch {
	case m.confirm != nil:
		c := m.confirm
		m.confirm = nil
		if k == "y" || k == "Y" {
			m.status, m.statusBad = fmt.Sprintf("sending %s to PID %d…", sigName(c.sig), c.t.PID), false
			return m, m.signalCmd(*c)
		}
		m.status, m.statusBad = "cancelled: no signal sent", false
		return m, nil
	case m.help:
		m.help = false
		return m, nil
	case m.filtering:
		return m.filterKey(msg), nil
	}
	switch k {
	case "q":
		return m, tea.Quit
	case "?":
		m.help = true
		return m, nil
	case "t":
		return m.askSignal(syscall.SIGTERM), nil
	case "k":
		return m.askSignal(syscall.SIGKILL), nil
	}
	if m.screen == screenDetail {
		switch k {
		case "esc", "enter", "backspace", "left":
			m.screen = screenMain
		}
		return m, nil
	}
	rows := m.rows()
	switch k {
	case "up":
		m.moveSel(rows, -1)
	case "down":
		m.moveSel(rows, 1)
	case "pgup":
		m.moveSel(rows, -max(1, m.tableRows()))
	case "pgdown":
		m.moveSel(rows, max(1, m.tableRows()))
	case "home":
		m.moveSel(rows, -len(rows))
	case "end":
		m.moveSel(rows, len(rows))
	case "enter":
		if i := m.selected(rows); i >= 0 {
			m.detail, m.screen = rows[i].key, screenDetail
		}
	case "m":
		m.setSort(sortMemory)
	case "p":
		m.setSort(sortPID)
	case "g":
		m.setSort(sortGrowth)
	case "u":
		m.setSort(sortUser)
	case "/":
		m.filtering = true
	case "esc":
		m.filter, m.status = "", ""
		m.keepSelection()
	}
	return m, nil
}

func (m *Model) filterKey(msg tea.KeyPressMsg) Model {
	switch msg.String() {
	case "enter":
		m.filtering = false
	case "esc":
		m.filtering, m.filter = false, ""
	case "backspace":
		if r := []rune(m.filter); len(r) > 0 {
			m.filter = string(r[:len(r)-1])
		}
	case "ctrl+u":
		m.filter = ""
	default:
		if t := msg.Key().Text; t != "" {
			m.filter += t
		}
	}
	m.selIdx = 0
	if rows := m.rows(); len(rows) > 0 {
		m.sel = rows[0].key
	}
	return *m
}

// setSort selects a sort order; choosing the current one reverses it.
// Memory and growth sort largest first, PID and user in ascending order.
func (m *Model) setSort(k sortKey) {
	if m.sortBy == k {
		m.ascending = !m.ascending
	} else {
		m.sortBy, m.ascending = k, k == sortPID || k == sortUser
	}
	m.keepSelection()
}

// askSignal opens the confirmation dialog for the selected (or detailed)
// process, or says in the status line why it will not.
func (m Model) askSignal(sig syscall.Signal) Model {
	bad := func(s string) Model { m.status, m.statusBad = s, true; return m }
	if m.cfg.ReadOnly {
		return bad("read-only mode (--read-only): signals are disabled")
	}
	p, ok := m.current()
	if !ok {
		return bad("no process selected")
	}
	t := target{PID: int(p.PID), Start: p.StartTime, Command: p.DisplayCommand(), Memory: p.Memory, Device: p.Device}
	if err := checkTarget(t, m.cfg.Self); err != nil {
		return bad(err.Error())
	}
	if m.cfg.Signaller == nil || m.cfg.Procs == nil {
		return bad("signals are unavailable: /proc could not be read, so process identity cannot be checked")
	}
	m.confirm = &confirm{t: t, sig: sig}
	m.status = ""
	return m
}

func (m Model) signalCmd(c confirm) tea.Cmd {
	st, sg, self := m.cfg.Procs, m.cfg.Signaller, m.cfg.Self
	sim := m.snap != nil && m.snap.Host.Simulated
	return func() tea.Msg {
		err := signalChecked(st, sg, self, c.t, c.sig)
		return signalMsg{t: c.t, sig: c.sig, err: err, simulated: sim}
	}
}

// current is the process the keys act on: the detail screen's, or the
// selected row's.
func (m Model) current() (gpu.Process, bool) {
	if m.screen == screenDetail {
		return m.find(m.detail)
	}
	rows := m.rows()
	if i := m.selected(rows); i >= 0 {
		return rows[i].p, true
	}
	return gpu.Process{}, false
}

func (m Model) find(k procKey) (gpu.Process, bool) {
	if m.snap == nil {
		return gpu.Process{}, false
	}
	for _, p := range m.snap.Processes {
		if p.Device == k.dev && p.PID == k.pid {
			return p, true
		}
	}
	return gpu.Process{}, false
}

// row is one line of the process table.
type row struct {
	p        gpu.Process
	key      procKey
	hist     []point
	growth   float64 // bytes per second
	growthOK bool
}

// rows returns the filtered, sorted process table.
func (m Model) rows() []row {
	if m.snap == nil {
		return nil
	}
	f := strings.ToLower(m.filter)
	out := make([]row, 0, len(m.snap.Processes))
	for _, p := range m.snap.Processes {
		if f != "" && !matches(p, f) {
			continue
		}
		r := row{p: p, key: procKey{p.Device, p.PID}}
		if ph := m.hist.proc[r.key]; ph != nil {
			r.hist = ph.mem.window()
			r.growth, r.growthOK = growth(r.hist)
		}
		out = append(out, r)
	}
	slices.SortStableFunc(out, func(a, b row) int {
		var c int
		switch m.sortBy {
		case sortMemory:
			c = cmp.Compare(a.p.Memory, b.p.Memory)
		case sortPID:
			c = cmp.Compare(a.p.PID, b.p.PID)
		case sortGrowth:
			if a.growthOK != b.growthOK { // unknown growth always last
				if a.growthOK {
					return -1
				}
				return 1
			}
			c = cmp.Compare(a.growth, b.growth)
		case sortUser:
			c = cmp.Compare(a.p.User, b.p.User)
		}
		if !m.ascending {
			c = -c
		}
		if c == 0 {
			c = cmp.Or(cmp.Compare(a.p.PID, b.p.PID), cmp.Compare(a.p.Device, b.p.Device))
		}
		return c
	})
	return out
}

// matches reports whether the filter text f (lower case) occurs in the
// process's PID, user, command line (as the table shows it, escapes
// included), flags, cgroup or container ID.
func matches(p gpu.Process, f string) bool {
	for _, s := range []string{strconv.Itoa(int(p.PID)), p.User, p.DisplayCommand(), p.Flags.String(), p.Cgroup, p.Container.ID, "gpu" + strconv.Itoa(p.Device)} {
		if strings.Contains(strings.ToLower(s), f) {
			return true
		}
	}
	return false
}

// selected returns the index of the selected row, -1 when there is none.
func (m Model) selected(rows []row) int {
	if len(rows) == 0 {
		return -1
	}
	for i, r := range rows {
		if r.key == m.sel {
			return i
		}
	}
	return min(max(m.selIdx, 0), len(rows)-1)
}

func (m *Model) moveSel(rows []row, by int) {
	if len(rows) == 0 {
		return
	}
	i := min(max(m.selected(rows)+by, 0), len(rows)-1)
	m.sel, m.selIdx = rows[i].key, i
}

// keepSelection re-anchors the selection after the rows changed: the same
// process if it is still listed, else the row now at its old position.
func (m *Model) keepSelection() {
	rows := m.rows()
	if i := m.selected(rows); i >= 0 {
		m.sel, m.selIdx = rows[i].key, i
	}
}
