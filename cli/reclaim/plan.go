package reclaim

// The plan: from a sample to the listed processes. See reclaim.go.

import (
	"fmt"
	"time"

	"github.com/vramhq/vram/gpu"
	"github.com/vramhq/vram/policy"
	"github.com/vramhq/vram/proc"
)

// Schema names the JSON layout of vram reclaim --json (docs/json.md).
const Schema = "vram.reclaim/v1"

// Report is everything vram reclaim found and did; --json prints it.
type Report struct {
	Schema         string       `json:"schema"` // Schema; writeJSON sets it
	Time           time.Time    `json:"time"`
	Simulated      bool         `json:"simulated"`
	Host           string       `json:"host"`
	DryRun         bool         `json:"dry_run"`
	Rules          string       `json:"rules"` // "flags" or the policy file
	ObserveSeconds float64      `json:"observe_seconds"`
	Signal         string       `json:"signal"`
	GraceSeconds   float64      `json:"grace_seconds"`
	Candidates     []*Candidate `json:"processes"`
	Declined       bool         `json:"declined"` // the user answered no
	// After acting: the devices' used memory before and after, and the
	// memory the re-sample no longer shows held by the signalled processes.
	Measured         bool           `json:"measured"`
	MeasuredAt       time.Time      `json:"measured_at,omitzero"`
	DevicesBefore    []DeviceMemory `json:"devices"`
	DevicesAfter     []DeviceMemory `json:"devices_after,omitempty"`
	FreedByProcesses uint64         `json:"freed_by_processes_bytes"`
	FreedOnDevices   int64          `json:"freed_on_devices_bytes"`
	Notes            []string       `json:"notes"`
	Warnings         []string       `json:"warnings"`
}

// DeviceMemory is one GPU's used memory at one sample.
type DeviceMemory struct {
	Index      int    `json:"gpu_index"`
	UUID       string `json:"gpu_uuid"`
	Name       string `json:"name"`
	TotalBytes uint64 `json:"total_bytes"`
	UsedBytes  uint64 `json:"used_bytes"`
	// FreedBytes is used before minus used after (negative when other
	// processes allocated meanwhile); set on the "devices" list after acting.
	FreedBytes int64 `json:"freed_bytes"`
}

// Candidate is one listed process: its evidence, the plan, what happened.
type Candidate struct {
	PID        int        `json:"pid"`
	GPUs       []int      `json:"gpu_indexes"`
	Bytes      uint64     `json:"bytes"`
	User       string     `json:"user"`
	Command    string     `json:"command"`
	PPID       int        `json:"ppid"`
	State      string     `json:"state"`
	StartTime  *time.Time `json:"start_time"`
	AgeSeconds float64    `json:"age_seconds"` // -1 when unknown
	Flags      []string   `json:"flags"`
	Rule       string     `json:"rule"`
	Reasons    []string   `json:"reasons"`
	// Action is term (SIGTERM, then SIGKILL after the grace), kill,
	// report (the rule only reports), or none (vram cannot or must not
	// signal it: Note says why and what to do).
	Action string `json:"action"`
	Note   string `json:"note,omitempty"`
	Steps  []Step `json:"signals"`
	Exited bool   `json:"exited_in_grace"`
	// BytesAfter is what the re-sample shows it holding (0 when the
	// driver no longer lists it); Freed is Bytes minus that.
	BytesAfter *uint64 `json:"bytes_after,omitempty"`
	Freed      uint64  `json:"freed_bytes"`

	identity proc.Identity
	grace    time.Duration
	display  string
}

// Step is one signal vram sent or refused to send.
type Step struct {
	Signal  string    `json:"signal"`
	Time    time.Time `json:"time"`
	Error   string    `json:"error,omitempty"`
	Refused bool      `json:"refused"` // vram decided not to send it
	Gone    bool      `json:"gone"`    // the process had exited (or its PID was reused)
}

// plan evaluates the policy's reclaim rules against the snapshot and
// returns the selected processes, one per PID, in the snapshot's order
// (largest memory first).
func plan(pol *policy.Policy, snap *gpu.Snapshot, self int, canCheck bool, observed time.Duration) []*Candidate {
	// The rules see one process per PID. One flagged idle was idle over
	// the whole observed window; vram saw nothing before it, so the
	// kernel's age stands for how long.
	sample := policy.FromSnapshot(snap, func(p gpu.Process) time.Duration {
		if !p.StartTime.IsZero() && snap.Time.Sub(p.StartTime) > observed {
			return snap.Time.Sub(p.StartTime)
		}
		return observed
	})
	merged := make(map[uint32]policy.Process, len(sample.Processes))
	for _, p := range sample.Processes {
		merged[uint32(p.PID)] = p
	}
	byPID := map[uint32]*Candidate{}
	for _, p := range snap.Processes {
		if c, ok := byPID[p.PID]; ok {
			c.GPUs = sortedDevices(append(c.GPUs, p.Device))
			continue
		}
		c := &Candidate{
			PID: int(p.PID), GPUs: []int{p.Device}, Bytes: merged[p.PID].Bytes, User: p.User, Command: p.Command(),
			PPID: p.PPID, State: p.State, AgeSeconds: -1, Flags: p.Flags.Names(), display: p.DisplayCommand(),
			identity: proc.Identity{PID: int(p.PID), StartTime: p.StartTime},
		}
		if !p.StartTime.IsZero() {
			t := p.StartTime
			c.StartTime = &t
			c.AgeSeconds = snap.Time.Sub(t).Seconds()
		}
		byPID[p.PID] = c
	}
	var out []*Candidate
	for _, a := range pol.EvaluateReclaim(sample) {
		c := byPID[uint32(a.PID)]
		c.Rule, c.Reasons, c.Action, c.grace = a.Rule, a.Reasons, string(a.Do), a.Grace
		if merged[uint32(a.PID)].IdleFor > 0 && merged[uint32(a.PID)].Jupyter {
			c.Reasons = append(c.Reasons, fmt.Sprintf("idleness observed over %v only; the rest is the kernel's age", observed))
		}
		switch {
		case c.PID <= 1:
			c.Action, c.Note = "none", "PID 1 (init): vram never signals it"
		case c.PID == self:
			c.Action, c.Note = "none", "this is vram itself"
		case merged[uint32(c.PID)].NoSuchProcess:
			c.Action, c.Note = "none", "cannot be signalled from here: /proc has no such process. It runs in another PID namespace "+
				"(a container: run vram reclaim inside it, or on the host) or it has just exited; on the host, "+
				"`nvidia-smi --query-compute-apps=pid,used_memory --format=csv` and `sudo fuser -v /dev/nvidia*` show who holds the GPU"
		case merged[uint32(c.PID)].Zombie:
			c.Action, c.Note = "none", fmt.Sprintf("cannot be signalled: it has already exited. Its memory is released when its parent (PID %d) reaps it, "+
				"so end or restart the parent, or when the driver finishes tearing its context down", c.PPID)
		case c.identity.StartTime.IsZero() || !canCheck:
			c.Action, c.Note = "none", "its start time cannot be read, so its identity cannot be checked before a signal"
		case c.Action == string(policy.DoReport):
			c.Note = "the rule only reports"
		}
		out = append(out, c)
	}
	return out
}
