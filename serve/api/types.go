package api

import (
	"context"
	"errors"
	"time"
)

// Schema is the value of the schema key of every JSON document this package
// writes. A change that removes or renames a key bumps it.
const Schema = "vram.serve/v3"

// State is the daemon's latest sample of the node, as GET /api/v1/state
// returns it and as each "state" event of GET /events carries it.
type State struct {
	Schema    string    `json:"schema"`
	Time      time.Time `json:"time"` // when the sample was taken
	Hostname  string    `json:"hostname"`
	Simulated bool      `json:"simulated"` // the host is gpu.Sim: every view says so
	// Mutations says whether the mutating endpoints (signal, reload) are
	// enabled on this daemon; a client hides its buttons when false.
	Mutations bool      `json:"mutations"`
	Devices   []Device  `json:"devices"`
	Processes []Process `json:"processes"` // largest first
	Alerts    []Alert   `json:"alerts"`    // firing now
	Warnings  []string  `json:"warnings,omitempty"`
}

// Device is one GPU in a State. Sizes are bytes.
type Device struct {
	Index             int    `json:"gpu_index"` // NVML index
	UUID              string `json:"gpu_uuid"`
	Name              string `json:"name"`
	Healthy           bool   `json:"healthy"`
	Error             string `json:"error,omitempty"` // why it is not healthy
	TotalBytes        uint64 `json:"total_bytes"`
	UsedBytes         uint64 `json:"used_bytes"`
	FreeBytes         uint64 `json:"free_bytes"`
	ReservedBytes     uint64 `json:"reserved_bytes"`
	ReservedKnown     bool   `json:"reserved_known"`
	UnattributedBytes uint64 `json:"unattributed_bytes"`
	UtilPercent       int    `json:"util_percent"` // -1 when unknown
	// Recent is the device's used bytes over the last samples, oldest
	// first (for sparklines); RecentStep is their spacing in seconds.
	Recent     []uint64 `json:"recent"`
	RecentStep float64  `json:"recent_step_seconds"`
}

// Process is one process on one GPU in a State.
type Process struct {
	GPU      string `json:"gpu_uuid"`
	GPUIndex int    `json:"gpu_index"`
	PID      uint32 `json:"pid"`
	// StartTime is, with PID, the identity a signal request must name.
	// It is the zero time, written as null, when /proc does not show the
	// process (another PID namespace, or it exited).
	StartTime time.Time `json:"start_time"`
	// Signalable says whether a signal request for the process can be
	// acted on; when not, NotSignalableReason says why (unknown start
	// time, a zombie, init or the daemon). This package sets both; it is
	// a property of the process, apart from whether the daemon accepts
	// mutations at all (State.Mutations).
	Signalable          bool   `json:"signalable"`
	NotSignalableReason string `json:"not_signalable_reason,omitempty"`
	User                string `json:"user"`
	Command             string `json:"command"` // one printable line (gpu.Printable)
	UsedBytes           uint64 `json:"used_bytes"`
	MemoryKnown         bool   `json:"memory_known"`
	// Flags are gpu.Flags' names (gpu.Flags.Names): no-such-process,
	// zombie, orphaned, jupyter, idle, no-permission.
	Flags     []string `json:"flags"`
	Container string   `json:"container,omitempty"` // container ID
	Pod       string   `json:"pod,omitempty"`
	Namespace string   `json:"namespace,omitempty"`
	// ContainerName is the Kubernetes container name, where known.
	ContainerName string   `json:"container_name,omitempty"`
	Leak          *Leak    `json:"leak,omitempty"` // the leak detector's verdict, once it has one
	Recent        []uint64 `json:"recent"`         // used bytes over the last samples, oldest first
	RecentStep    float64  `json:"recent_step_seconds"`
	// AllocatorFields: allocated_bytes, reserved_bytes (null when the
	// process is not on vram's allocator) and allocator (allocator.go).
	AllocatorFields
}

// Leak is the leak detector's verdict on one process.
type Leak struct {
	Verdict    string  `json:"verdict"` // detect.VerdictLeak, VerdictNoLeak or VerdictInsufficient
	Slope      float64 `json:"slope_bytes_per_second"`
	Confidence float64 `json:"confidence"`
	Reason     string  `json:"reason"`
}

// Alert is one alert, firing or resolved.
type Alert struct {
	Time      time.Time `json:"time"`
	Rule      string    `json:"rule"`
	Severity  string    `json:"severity"` // "warning", "critical"
	State     string    `json:"state"`    // "firing", "resolved"
	GPU       string    `json:"gpu_uuid,omitempty"`
	PID       uint32    `json:"pid,omitempty"`
	StartTime time.Time `json:"start_time,omitzero"`
	Message   string    `json:"message"`
}

// Action is one entry of the policy audit trail.
type Action struct {
	Time      time.Time `json:"time"`
	Rule      string    `json:"rule"`
	PID       uint32    `json:"pid"`
	StartTime time.Time `json:"start_time,omitzero"`
	Action    string    `json:"action"`
	Reason    string    `json:"reason"`
	Result    string    `json:"result"`
}

// Range is a quantity's spread over one history bucket.
type Range struct {
	Min  uint64  `json:"min"`
	Max  uint64  `json:"max"`
	Mean float64 `json:"mean"`
}

// DevicePoint is one bucket of a device's history. Its keys are those of
// Device: sizes end in _bytes, the utilization in _percent.
type DevicePoint struct {
	Time     time.Time `json:"t"` // the bucket's start
	Samples  int       `json:"samples"`
	Used     Range     `json:"used_bytes"`
	Reserved Range     `json:"reserved_bytes"`
	Free     Range     `json:"free_bytes"`
	Total    uint64    `json:"total_bytes"`
	Util     *Range    `json:"util_percent,omitempty"` // absent when unknown
}

// ProcessPoint is one bucket of one process lifetime's history.
type ProcessPoint struct {
	Time      time.Time `json:"t"`
	PID       uint32    `json:"pid"`
	StartTime time.Time `json:"start_time"` // null when unknown, as in Process
	Samples   int       `json:"samples"`
	Bytes     Range     `json:"used_bytes"`
	Flags     []string  `json:"flags"`
	// AllocatorRanges: allocated_bytes and reserved_bytes over the bucket
	// (allocator.go).
	AllocatorRanges
}

// HistoryQuery is a history range: [From, To) in buckets of Step (0: every
// stored sample).
type HistoryQuery struct {
	From, To time.Time
	Step     time.Duration
}

// SignalRequest asks the daemon to signal one process. The process is named
// by its identity, PID and start time as the State showed it; the daemon
// re-checks both right before the signal.
type SignalRequest struct {
	PID       uint32    `json:"pid"`
	StartTime time.Time `json:"start_time"`
	Signal    string    `json:"signal"` // "TERM" or "KILL"
	Reason    string    `json:"reason"`
}

// SignalResult says what a SignalRequest did.
type SignalResult struct {
	Action Action `json:"action"` // as written to the audit trail
}

// Event is one item of the live stream: Kind is the SSE event name ("state",
// "alert", "action") and the pointer of that kind is set, except that a
// "state" event may come without its State: it then says that there is a
// new sample, whose State the stream reads from Backend.State when it
// writes the event.
type Event struct {
	Kind   string
	State  *State
	Alert  *Alert
	Action *Action
}

// Backend is what the HTTP layer needs from the daemon. The daemon
// (package serve) implements it; tests use a fake.
type Backend interface {
	// State returns the latest sample; ok is false before the first one.
	State() (s State, ok bool)
	// Subscribe returns a channel of live events and a function that
	// cancels the subscription (and closes the channel). A subscriber that
	// does not keep up loses events, never blocks the daemon.
	Subscribe() (<-chan Event, func())
	DeviceHistory(ctx context.Context, uuid string, q HistoryQuery) ([]DevicePoint, error)
	ProcessHistory(ctx context.Context, uuid string, pid uint32, q HistoryQuery) ([]ProcessPoint, error)
	Alerts(ctx context.Context, from, to time.Time) ([]Alert, error)
	Actions(ctx context.Context, from, to time.Time) ([]Action, error)
	// Signal and Reload are the mutating operations. The HTTP layer checks
	// the token and the read-only setting before it calls them.
	Signal(ctx context.Context, r SignalRequest) (SignalResult, error)
	Reload(ctx context.Context) error
}

// Errors a Backend wraps so that the HTTP layer answers with the right status:
// ErrNotFound 404 (no such GPU or process), ErrConflict 409 (the process named
// is no longer the one running under that PID, or a rule forbids acting on
// it), ErrInvalid 400 (a request the backend refuses as malformed).
var (
	ErrNotFound = errors.New("not found")
	ErrConflict = errors.New("conflict")
	ErrInvalid  = errors.New("invalid request")
)
