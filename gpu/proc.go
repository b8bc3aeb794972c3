package gpu

import (
	"errors"
	"fmt"
	"io/fs"
	"os/user"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/procfs"

	"github.com/vramhq/vram/proc"
)

// ProcSource reads what the kernel knows about a process. ProcFS reads a
// proc file system; Sim has its own.
type ProcSource interface {
	// Stat is the cheap read (one small file): identity, parent, state.
	// A process that does not exist yields an error wrapping ErrNoProcess.
	Stat(pid int) (ProcStat, error)
	// Details is the expensive read, done once per process lifetime:
	// owner, command line, cgroup.
	Details(pid int) (ProcDetails, error)
}

// ErrNoProcess is wrapped by ProcSource errors for a PID with no process.
// It is proc.ErrNoProcess.
var ErrNoProcess = proc.ErrNoProcess

// ProcStat is the part of /proc/PID/stat the classification uses: a
// process's identity (PID and start time), parent, session, state and
// comm. It is proc.Stat, which owns it.
type ProcStat = proc.Stat

// Printable returns s as one line that is safe to write to a terminal. It is
// proc.Printable, which documents the escapes.
func Printable(s string) string { return proc.Printable(s) }

// ProcDetails is what is read once per process lifetime.
type ProcDetails struct {
	UID       uint32
	User      string // name from the UID, or the UID in decimal
	Cmdline   []string
	Cgroup    string // the v2 path, or the v1 memory controller's
	Container Container
}

// Container is where a cgroup path says a process runs.
type Container struct {
	// Runtime is docker, containerd, cri-o, podman, or cri (a Kubernetes
	// pod whose path does not name the runtime). Empty outside containers.
	Runtime string `json:"runtime,omitempty"`
	ID      string `json:"id,omitempty"`      // 64 hex digits
	PodUID  string `json:"pod_uid,omitempty"` // Kubernetes pod UID
}

// ProcFS is a ProcSource on a proc file system. It is safe for concurrent use.
type ProcFS struct {
	root     string
	fs       procfs.FS
	bootTime time.Time
	lookup   func(uid uint32) (string, error)

	mu    sync.Mutex
	users map[uint32]string
}

// NewProcFS reads the proc file system mounted at root ("/proc" normally).
// lookupUser maps a UID to a name; nil uses the host's user database.
func NewProcFS(root string, lookupUser func(uid uint32) (string, error)) (*ProcFS, error) {
	pfs, err := procfs.NewFS(root)
	if err != nil {
		return nil, fmt.Errorf("open proc file system %s: %w", root, err)
	}
	st, err := pfs.Stat()
	if err != nil {
		return nil, fmt.Errorf("read boot time from %s/stat: %w", root, err)
	}
	if lookupUser == nil {
		lookupUser = func(uid uint32) (string, error) {
			u, err := user.LookupId(strconv.FormatUint(uint64(uid), 10))
			if err != nil {
				return "", err
			}
			return u.Username, nil
		}
	}
	return &ProcFS{root: root, fs: pfs, bootTime: time.Unix(int64(st.BootTime), 0), lookup: lookupUser, users: map[uint32]string{}}, nil
}

func procErr(pid int, what string, err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("pid %d: %w", pid, ErrNoProcess)
	}
	return fmt.Errorf("pid %d: read %s: %w", pid, what, err)
}

// Stat reads /proc/PID/stat (proc.ReadStat) and dates the start time from
// the boot time.
func (p *ProcFS) Stat(pid int) (ProcStat, error) {
	st, _, err := proc.ReadStat(p.root, pid, nil)
	if errors.Is(err, proc.ErrNoProcess) {
		return ProcStat{}, fmt.Errorf("pid %d: %w", pid, ErrNoProcess)
	}
	if err != nil {
		return ProcStat{}, fmt.Errorf("pid %d: %w", pid, err)
	}
	st.StartTime = proc.Started(p.bootTime, st.StartTicks)
	return st, nil
}

// Details reads /proc/PID/status (owner), cmdline and cgroup.
func (p *ProcFS) Details(pid int) (ProcDetails, error) {
	pr, err := p.fs.Proc(pid)
	if err != nil {
		return ProcDetails{}, procErr(pid, "proc", err)
	}
	var d ProcDetails
	st, err := pr.NewStatus()
	if err != nil {
		return ProcDetails{}, procErr(pid, "status", err)
	}
	d.UID = uint32(st.UIDs[0])
	d.User = p.userName(d.UID)
	if d.Cmdline, err = pr.CmdLine(); err != nil {
		return ProcDetails{}, procErr(pid, "cmdline", err)
	}
	cgs, err := pr.Cgroups()
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return ProcDetails{}, procErr(pid, "cgroup", err)
	}
	d.Cgroup = pickCgroup(cgs)
	d.Container = ParseContainer(d.Cgroup)
	return d, nil
}

func (p *ProcFS) userName(uid uint32) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if n, ok := p.users[uid]; ok {
		return n
	}
	n, err := p.lookup(uid)
	if err != nil || n == "" {
		n = strconv.FormatUint(uint64(uid), 10)
	}
	p.users[uid] = n
	return n
}

// pickCgroup chooses the path that locates a process: the unified (v2)
// hierarchy when it has one, else the v1 memory controller, else the first
// non-root path.
func pickCgroup(cgs []procfs.Cgroup) string {
	var v1mem, first string
	for _, c := range cgs {
		if c.HierarchyID == 0 && len(c.Controllers) == 0 && c.Path != "/" && c.Path != "" {
			return c.Path
		}
		for _, ctl := range c.Controllers {
			if ctl == "memory" {
				v1mem = c.Path
			}
		}
		if first == "" && c.Path != "/" {
			first = c.Path
		}
	}
	if v1mem != "" {
		return v1mem
	}
	if first == "" && len(cgs) > 0 {
		return cgs[0].Path
	}
	return first
}

var (
	// <runtime>-<id>.scope, as systemd's cgroup driver names containers.
	scopeRe = regexp.MustCompile(`^(docker|cri-containerd|crio|libpod|nerdctl)-([0-9a-f]{64})\.scope$`)
	bareID  = regexp.MustCompile(`^(?:docker-|crio-)?([0-9a-f]{64})$`)
	podRe   = regexp.MustCompile(`pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})`)
)

var scopeRuntime = map[string]string{"docker": "docker", "cri-containerd": "containerd", "crio": "cri-o", "libpod": "podman", "nerdctl": "containerd"}

// ParseContainer finds the container runtime, container ID and Kubernetes
// pod UID in a cgroup path. It knows the systemd driver's scope names
// (docker-ID.scope, cri-containerd-ID.scope, crio-ID.scope,
// libpod-ID.scope) and the cgroupfs driver's plain paths (/docker/ID,
// /kubepods/burstable/podUID/ID). A path it does not recognise yields the
// zero Container.
func ParseContainer(path string) Container {
	var c Container
	segs := strings.Split(path, "/")
	for i := len(segs) - 1; i >= 0 && c.ID == ""; i-- {
		if m := scopeRe.FindStringSubmatch(segs[i]); m != nil {
			c.Runtime, c.ID = scopeRuntime[m[1]], m[2]
		} else if m := bareID.FindStringSubmatch(segs[i]); m != nil && i > 0 {
			c.ID = m[1]
			parent := strings.Join(segs[:i], "/")
			switch {
			case strings.Contains(parent, "docker"):
				c.Runtime = "docker"
			case strings.Contains(parent, "crio"):
				c.Runtime = "cri-o"
			case strings.Contains(parent, "containerd"):
				c.Runtime = "containerd"
			case strings.Contains(parent, "libpod"):
				c.Runtime = "podman"
			case strings.Contains(parent, "kubepods"):
				c.Runtime = "cri"
			default:
				c.ID = "" // 64 hex digits outside any known layout: not a container
			}
		}
	}
	if strings.Contains(path, "kubepods") {
		if m := podRe.FindStringSubmatch(path); m != nil {
			c.PodUID = strings.ReplaceAll(m[1], "_", "-")
			if c.Runtime == "" {
				c.Runtime = "cri"
			}
		}
	}
	return c
}
