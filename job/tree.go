package job

// The process tree of a job. See doc.go for an overview.

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/vramhq/vram/proc"
)

// member is a process of the job's tree.
type member struct {
	pid, ppid int
	start     uint64
	state     string // R, S, D, Z, X, T, ...
	comm      string
}

// seenPID is the classification of a PID listed by the last scan.
type seenPID struct {
	start  uint64
	member bool
}

// tree tracks a job's process tree: the root (the command vram started)
// and its descendants, found through the PPid links in /proc.
//
// Each scan lists /proc (one getdents), reads /proc/PID/stat of every PID
// it has not seen before and of every member (to notice exits, PID reuse
// and zombies), and classifies new PIDs: a process whose parent is a member
// is a member. A PID listed by the previous scan that is not a member keeps
// its classification without a read: a process cannot join the tree later
// (reparenting only ever moves a process to init or to a subreaper, never
// into a tree it was not part of). The first scan reads every process once.
//
// A member stays a member while its (PID, start time) lives, even when its
// parent exits and it is reparented, so that a worker whose launcher
// exited is still counted. A descendant whose parent exits before any scan
// sees it is missed unless vram is a subreaper (Spec.Subreaper): then the
// orphan is reparented to vram and found through that link.
//
// Not safe for concurrent use: the supervisor's sampling goroutine owns it.
type tree struct {
	root      string // proc root ("/proc")
	rootPID   int
	rootStart uint64
	self      int // vram's own PID: orphans reparented to a subreaper vram point here

	members map[int]member
	seen    map[int]seenPID
	buf     []byte
	names   []string
}

func newTree(procRoot string, rootPID int) (*tree, error) {
	t := &tree{
		root:    procRoot,
		rootPID: rootPID,
		self:    os.Getpid(),
		members: map[int]member{},
		seen:    map[int]seenPID{},
	}
	st, buf, err := proc.ReadStat(procRoot, rootPID, nil)
	t.buf = buf
	if err != nil {
		return nil, fmt.Errorf("job process %d: %w", rootPID, err)
	}
	t.rootStart = st.StartTicks
	t.members[rootPID] = member{pid: rootPID, ppid: st.PPID, start: st.StartTicks, state: st.State, comm: st.Comm}
	return t, nil
}

// scan refreshes the members. It returns the PIDs that left the tree
// (exited or replaced) since the last scan.
func (t *tree) scan() (gone []int, err error) {
	d, err := os.Open(t.root)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", t.root, err)
	}
	t.names, err = d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", t.root, err)
	}
	seen := make(map[int]seenPID, len(t.names))
	var fresh []proc.Stat
	for _, name := range t.names {
		if name == "" || name[0] < '0' || name[0] > '9' {
			continue
		}
		pid, err := strconv.Atoi(name)
		if err != nil {
			continue
		}
		old, known := t.seen[pid]
		if known && !old.member {
			seen[pid] = old
			continue
		}
		var st proc.Stat
		st, t.buf, err = proc.ReadStat(t.root, pid, t.buf)
		if err != nil {
			continue // exited between the listing and the read, or unreadable
		}
		if m, ok := t.members[pid]; ok && m.start == st.StartTicks {
			m.ppid, m.state = st.PPID, st.State
			t.members[pid] = m
			seen[pid] = seenPID{start: st.StartTicks, member: true}
			continue
		}
		fresh = append(fresh, st)
	}
	// Members not confirmed by this scan have exited or been replaced.
	for pid := range t.members {
		if s, ok := seen[pid]; !ok || !s.member {
			gone = append(gone, pid)
			delete(t.members, pid)
		}
	}
	// Classify the fresh PIDs; a parent may itself be fresh, so repeat
	// until nothing changes (parents usually come first: one or two passes).
	for changed := true; changed; {
		changed = false
		rest := fresh[:0]
		for _, st := range fresh {
			_, parentIn := t.members[st.PPID]
			isRoot := st.PID == t.rootPID && st.StartTicks == t.rootStart
			if isRoot || parentIn {
				t.members[st.PID] = member{pid: st.PID, ppid: st.PPID, start: st.StartTicks, state: st.State, comm: st.Comm}
				seen[st.PID] = seenPID{start: st.StartTicks, member: true}
				changed = true
				continue
			}
			rest = append(rest, st)
		}
		fresh = rest
	}
	for _, st := range fresh {
		seen[st.PID] = seenPID{start: st.StartTicks}
	}
	t.seen = seen
	sort.Ints(gone)
	return gone, nil
}

// has reports whether pid is a member.
func (t *tree) has(pid int) bool {
	_, ok := t.members[pid]
	return ok
}

// pids returns the members' PIDs in ascending order.
func (t *tree) pids() []int {
	out := make([]int, 0, len(t.members))
	for pid := range t.members {
		out = append(out, pid)
	}
	sort.Ints(out)
	return out
}

// reap collects zombies of the tree that were reparented to vram (when it
// is a subreaper). The root is left to its exec.Cmd.
func (t *tree) reap() {
	for pid, m := range t.members {
		if pid != t.rootPID && m.ppid == t.self && (m.state == "Z" || m.state == "X") {
			var ws unix.WaitStatus
			unix.Wait4(pid, &ws, unix.WNOHANG, nil)
		}
	}
}

// signal sends sig to every member, the root first. Before each signal
// the process's identity is checked again: a pidfd is opened, then
// /proc/PID/stat is read; only when the start time still matches is the
// signal sent, through the pidfd, so that a PID reused by an unrelated
// process between the check and the signal is never hit. Kernels without
// pidfds fall back to kill(2) right after the check. It returns the PIDs
// signalled.
func (t *tree) signal(sig syscall.Signal) (sent []int, err error) {
	pids := t.pids()
	sort.SliceStable(pids, func(i, j int) bool { return pids[i] == t.rootPID && pids[j] != t.rootPID })
	var errs []error
	for _, pid := range pids {
		m := t.members[pid]
		if m.state == "Z" || m.state == "X" {
			continue
		}
		ok, err := signalChecked(t.root, pid, m.start, sig)
		if err != nil {
			errs = append(errs, err)
		}
		if ok {
			sent = append(sent, pid)
		}
	}
	return sent, errors.Join(errs...)
}

// signalChecked signals pid if it still has the given start time, through
// package proc's checked path (pidfd opened first, start time re-read, signal
// through the pidfd). A process that is gone or replaced is not an error.
func signalChecked(root string, pid int, start uint64, sig syscall.Signal) (bool, error) {
	err := proc.Signal(statReader(root), proc.Pidfd, os.Getpid(), proc.Identity{PID: pid, StartTicks: start}, sig)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, proc.ErrGone):
		return false, nil // gone or replaced: not ours any more
	}
	return false, err
}

// statReader is a proc.Stater over a proc root's /proc/PID/stat.
type statReader string

func (root statReader) Stat(pid int) (proc.Stat, error) {
	st, _, err := proc.ReadStat(string(root), pid, nil)
	if errors.Is(err, proc.ErrNoProcess) {
		return proc.Stat{}, fmt.Errorf("PID %d: %w", pid, proc.ErrNoProcess)
	}
	return st, err
}

// setSubreaper makes vram the reaper of orphans of its descendants.
func setSubreaper() error {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("become a subreaper: %w", err)
	}
	return nil
}
