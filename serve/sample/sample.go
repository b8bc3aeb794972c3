// Package sample is the node daemon's record of a process at one sample:
// one Process per process per GPU per sample, from which every view of it
// is derived: the alert engine's input (serve/alert), the history tick
// (serve/store), what the policy rules test (policy, which merges a
// process's GPUs) and the live State (serve/api, built by serve). The
// views read the record; none converts the sampler's gpu.Process again.
//
// vram reclaim builds the same records from a snapshot (FromGPU) for the
// policy rules.
package sample

import (
	"time"

	"github.com/vramhq/vram/alloc/statchan"
	"github.com/vramhq/vram/gpu"
	"github.com/vramhq/vram/serve/workload"
)

// Process is one process on one GPU at one sample.
type Process struct {
	GPU      string // the GPU's UUID
	GPUIndex int    // the GPU's NVML index
	PID      uint32
	// StartTime is, with GPU and PID, the process's identity (a reused
	// PID has another). It is the zero time when /proc does not show the
	// process (another PID namespace, or it exited).
	StartTime time.Time
	User      string
	// Command is the command line as /proc has it (gpu.Process.Command):
	// what the history stores and the policy globs match. Display is the
	// same on one printable line (gpu.Process.DisplayCommand): what the
	// State and the alert messages show.
	Command, Display string
	Cgroup           string
	ContainerID      string // the container's ID from the cgroup; empty outside containers
	PodUID           string // the Kubernetes pod UID from the cgroup, where there is one

	// Bytes is the device memory the process holds. Where the driver
	// cannot say (MIG, WDDM) MemoryKnown is false and Bytes is 0: every
	// view counts unknown memory as none, and the State says which it is.
	// This is the one place that rule is applied (New).
	Bytes       uint64
	MemoryKnown bool
	Flags       gpu.Flags
	// Alloc is what vram's allocator inside the process (libvram) says
	// of this GPU through its statistics channel (docs/channel.md):
	// allocated, reserved, fragmentation, OOMs. nil when the process does
	// not run it. The record is the sample's (gpu.Process.Alloc) and
	// shared by every view: none modifies it.
	Alloc *statchan.Record

	// What the daemon adds from watching the process across samples; zero
	// from FromGPU.
	//
	// IdleFor is how long the process has been flagged idle (0 when it is
	// not), the sampler's idle window included.
	IdleFor time.Duration
	// Leak says that the leak detector's verdict is a confirmed leak;
	// Slope is then its growth estimate in bytes per second.
	Leak  bool
	Slope float64
	// Workload names the pod, namespace and container the process runs
	// in, where the kubelet says (serve/workload).
	Workload workload.Workload
}

// New is the record of p as sampled, with its command line given as
// command (p.Command()) and display (p.DisplayCommand()): the daemon reads
// them once per process lifetime rather than joining and escaping them at
// every sample.
func New(p *gpu.Process, command, display string) Process {
	r := Process{
		GPU: p.DeviceUUID, GPUIndex: p.Device, PID: p.PID, StartTime: p.StartTime, User: p.User,
		Command: command, Display: display, Cgroup: p.Cgroup, ContainerID: p.Container.ID, PodUID: p.Container.PodUID,
		Bytes: p.Memory, MemoryKnown: p.MemoryKnown, Flags: p.Flags, Alloc: p.Alloc,
	}
	if !p.MemoryKnown {
		r.Bytes = 0
	}
	return r
}

// FromGPU is the record of p as sampled.
func FromGPU(p gpu.Process) Process { return New(&p, p.Command(), p.DisplayCommand()) }
