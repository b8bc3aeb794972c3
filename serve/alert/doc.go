// Package alert turns the node daemon's samples into alerts and delivers them
// to the log and to webhooks. It has three parts, each usable alone:
//
//   - Decode reads the alerts: section of the daemon's configuration file
//     into a Config (rules and webhooks), strictly.
//   - Engine evaluates the rules on each sample and returns the transitions:
//     alerts that start firing and alerts that resolve. It is pure: no
//     goroutines, no clock (time is the sample's), no I/O.
//   - Notifier logs every alert and posts them to the webhooks, each webhook
//     with its own bounded queue, worker and retry policy.
//
// The daemon calls them in that order: Decode at start and at each reload,
// Engine.Evaluate once per sample (every second by default), Notifier.Notify
// with what Evaluate returned, and the store with the same alerts. Its
// input is the daemon's sample: Device is its own small type, a process is
// the daemon's record of it (serve/sample.Process, whose Display, Bytes,
// Flags, Leak, Slope and Alloc the rules read), and alerts are serve/api's Alert,
// the type the JSON API, the store and the dashboard already speak.
//
// # Rules and instances
//
// A rule names a condition (Condition: leak, used_above, orphan_holding,
// unattributed_above, device_unhealthy, and on the figures of vram's
// allocator inside a process fragmentation_above and allocator_oom, which
// allocator.go evaluates), its threshold, a severity and two
// durations. A rule applies to many subjects at once: used_above to every
// GPU, leak to every process. The Engine keeps one instance per rule and
// subject, keyed by
//
//	(rule, GPU UUID)                       device rules
//	(rule, GPU UUID, PID, start time)      process rules
//
// so that a PID reused by a new process is a new instance, and the same
// process on two GPUs is two. An instance exists only while its condition
// holds or its alert fires. A sample costs one pass over the devices or the
// processes per rule and one map lookup per subject; messages are written
// only for instances that fire or are firing, so a sample where nothing holds
// allocates nothing (BenchmarkEvaluate: 8 GPUs × 200 processes, five rules,
// about 0.2 ms a sample; figures in docs/alerts.md).
//
// # Life of an instance
//
//	absent --holds--> pending --held For--> firing --stops holding for KeepFiringFor--> resolved (removed)
//	          pending --stops holding--> removed silently (no alert was sent)
//	          firing  --subject gone from the sample--> resolved at once
//
// For is measured on sample times: the instance remembers when the condition
// first held and fires at the first sample at least For later. A single
// sample where it does not hold resets a pending instance: "above 90 % for
// 5m" means every sample for five minutes. KeepFiringFor (0 by default) is the
// mirror image for resolution: a value hovering at the threshold would
// otherwise fire and resolve every second. A process that leaves the sample
// (it exited, or released its memory and left NVML's list) resolves its
// alerts at once, and so does a GPU that leaves it. So the daemon should keep
// a lost GPU in its samples, marked unhealthy, for device_unhealthy to fire
// rather than resolve.
//
// A GPU whose memory could not be read (Device.Total is 0) has unknown
// figures. The memory rules then keep its firing alerts as they are (an error
// resolves nothing) and start its pending ones over (the condition was not
// seen holding throughout For, so it does not fire on a guess).
//
// Evaluate returns transitions in a fixed order (rule order, then GPU index,
// PID and start time) so that the same samples always give the same alerts.
// Firing returns what fires now, with the message updated to the latest
// figures ("for 12m3s" grows) and Time still the moment it started firing.
//
// SetRules replaces the rules on a reload. An instance survives when its rule
// is unchanged (same name and fields; moving it in the file does not count);
// a firing alert of a rule that was removed or changed resolves at the next
// Evaluate, with a message that says so, and a changed rule starts over.
//
// # Messages
//
// Every alert's message is one line a person can act on, with figures in
// binary units: "GPU 0 (NVIDIA H200): 92.1% used (129.00 GiB of 140.00
// GiB) for 5m0s". Percentages are truncated, never rounded up, so a figure
// shown is never above a threshold it is under. Command lines and driver
// error strings pass through gpu.Printable and are shortened.
//
// # Delivery
//
// Notify logs each alert at once (slog: a firing critical alert at Error, a
// firing warning at Warn, a resolution at Info) and appends it to each
// webhook's queue. It never waits for the network. A queue holds at most
// NotifierOptions.QueueSize alerts; when full, the oldest are dropped and
// counted (Stats.Dropped): under a storm the newest state of the node matters
// more than its history, which the store keeps anyway.
//
// Each webhook has a worker goroutine. When woken it takes everything queued
// and posts it as one JSON document (Payload: schema "vram.alert/v2", the host
// name, the alerts oldest first), so that a webhook that was down receives one
// request for the backlog rather than one per alert. An attempt fails on a
// network error, no answer within the webhook's timeout, or a status other
// than 2xx. Network errors, timeouts, 5xx and 429 are retried, up to
// max_attempts attempts in all; the delay before retry k is backoff·2^(k-1),
// capped at max_backoff, then jittered to a uniformly random point in its
// upper half (so daemons that failed together retry apart). A Retry-After
// header (seconds or an HTTP date) on a 429 or 5xx lengthens the delay to what
// the server asked, up to MaxRetryAfter. Other 4xx answers and redirects are
// not retried: the request is wrong, and sending it again will not fix it. The
// default client does not follow redirects, because custom headers may carry
// secrets. Alerts queued while a batch is being retried wait for the next
// batch.
//
// Logs name a webhook by scheme and host only: many services put the secret
// in the URL's path.
//
// Close stops queueing, lets each worker finish its queue (retries included)
// until its context ends, then cancels what is in flight; alerts still queued
// are counted as dropped, those of a batch cut short as failed.
//
// # What this package does not do
//
// There is no grouping, inhibition or silencing: a fleet with Prometheus
// should use Alertmanager on the daemon's metrics (deploy/ ships rules for
// it); these alerts are for nodes without it and for the dashboard. Webhook
// payloads are vram's own JSON, not Slack's or PagerDuty's formats; a small
// relay adapts them. Pending instances are not persisted: after a restart a
// condition must hold for For again before it fires, and alerts that were
// firing fire again (with a new time) if their condition still holds.
package alert
