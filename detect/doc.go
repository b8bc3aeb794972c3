// Package detect decides whether a memory counter is leaking, from a series
// of (time, bytes) samples: device memory used by a process as NVML reports
// it, reserved bytes of an allocator, anything that should settle once a job
// is warm. It is shared by vram run (the verdict at job exit), vram top (the
// growth column) and the daemon.
//
// # The problem
//
// Memory of a healthy job is not flat. It rises fast while the job warms up
// (CUDA context, weights, the first batches fill the allocator's cache); it
// swings every step between a floor (what stays allocated) and a peak that
// varies with the batch; it jumps when the job loads another model or the
// cache grows once for a bigger batch. A leak is none of these: it is a floor
// that keeps rising. So the detector looks at the floor, not at the level,
// and asks whether the floor is still going up now.
//
// # How
//
//  1. Windows. Samples are grouped into fixed windows (Config.Window, 5s by
//     default), and only each window's minimum (the floor under the
//     sawtooth of the steps, placed at the time it was read) and maximum
//     (for the time-to-OOM projection) are kept. The window must be longer
//     than one step of the workload; it works with any sampling interval
//     and with irregular or missing samples, but needs several samples per
//     window to see the floor. When windows hold fewer than 12 samples (1 s
//     sampling), a window whose floor stands more than 8σ above the next
//     window's takes that floor: overlapping windows twice as long, used
//     only where a window's few samples all missed the floor, so that noise
//     stays independent from window to window.
//  2. Bounded memory. At most MaxWindows windows are kept. When full, the
//     oldest half is coarsened by merging adjacent windows (the pair of
//     smallest combined weight, the oldest on ties), so resolution falls off
//     with age and the newest half stays at full resolution. A merged
//     window's floor is the weighted mean of the two floors: the minimum of
//     more samples would be lower under noise and fake a rising trend.
//  3. Warm-up. A warm-up is a rise that slows down; a leak keeps its pace.
//     Leading windows are dropped, for at most MaxWarmup (2 min), while the
//     floor's rise over the next three windows is more than max(MinGrowth,
//     6σ) and more than twice the rise over the three windows after (a rise
//     slowing down), or while that rise is faster than WarmupRate (8 MiB/s)
//     and either the series spans less than SteadyRise (45 s) or the rise
//     from there on is not steady: the Theil–Sen slope over its newest third
//     is under ¾ of the slope over its oldest third. A fast rise that keeps
//     its pace for SteadyRise is judged like any other, and called a leak;
//     warm-up ramps shorter than about 40 s have levelled off by then.
//  4. Spikes and steps. The floor's noise σ is the median absolute residual
//     against the running median of three windows, after the typical pace
//     (the median window-to-window rate) is taken out, scaled to a standard
//     deviation; isolated outliers barely move it. With τ = max(StepMin, 8σ):
//     runs of up to two windows standing more than τ above the windows on
//     both sides are lowered (their samples all missed the floor); the
//     newest windows that jump by more than τ beyond the typical pace are
//     held back until later windows confirm them; and a window-to-window
//     change further than τ from what the typical pace predicts over its
//     time is a step. Steps split the floor into segments.
//  5. Trend. Inside segments, horizons ending now are tested: the newest
//     12 windows, 24, 48, … and all steady windows. Each gets the blocked
//     Mann–Kendall test (pairs compared only inside one segment; S and the
//     tie-corrected variance summed over segments; Z with continuity
//     correction; one-sided p for "rising") and the Theil–Sen slope over the
//     same pairs, so a level shift between segments adds nothing to either.
//     A horizon shows a leak when p < Alpha / (number of horizons), the
//     slope is at least MinSlope, the growth (slope × span) at least
//     MinGrowth, the second half of the horizon rises at least a quarter as
//     fast as the first half (otherwise it is leveling off), and the rise is
//     not carried by its largest single jump (with that jump replaced by the
//     median increment, the test must stay significant). The short horizons
//     catch leaks that start late in a long series; the long ones catch slow
//     leaks under noise. The verdict reports the shortest horizon that shows a
//     leak: its slope is the rate now, which a longer horizon would dilute
//     with the flat time before a late leak.
//  6. Ratchet. A floor that only moves in large steps (the allocator grows
//     by whole segments) is flat inside its segments. RatchetSteps steps up
//     (4), each followed by two windows at its level, none down in the
//     steady state, and the last one no longer ago than twice the median gap
//     between them, make a leak.
//
// # Choices
//
// One step up is not a leak: memory that grew once and then stayed flat
// (a cache that grew for a larger batch, a second model loaded) will not run
// the job out of memory later. The verdict is NoLeak and the reason names
// the step. Two or three steps up are not a leak either; four or more, never
// undone and still happening, are. A rise that is slowing down is not a
// leak yet; if it keeps going, the newer horizons will show it.
//
// Confidence is 1 − P, where P is the one-sided Mann–Kendall p-value of the
// reported horizon multiplied by the number of horizons tested (Bonferroni),
// capped at 1. Alpha bounds the chance of a false call on a flat series for
// one verdict; a caller that asks every few seconds over days asks many
// times, and should require the call to persist before acting: Confirm
// reports a leak once every verdict over 15 s said Leak. Verdict itself does
// not wait, so that a job of a minute still gets its answer at the end.
//
// The Mann–Kendall test assumes independent windows. Window minima of
// independent noise are independent, but a workload whose floor wanders
// slowly (autocorrelated over many windows) can look like a trend over a
// short horizon; MinGrowth and the leveling-off check limit that, they do
// not remove it.
//
// TimeToOOM projects the recent peak (not the floor) at the slope: a job
// runs out of memory when its peak meets the capacity.
//
// Cost: Add is O(1) (and O(MaxWindows) once per window when the list is
// full). Verdict is O(MaxWindows) on a floor that does not move (the
// shortcut in flat), and O(MaxWindows²) otherwise for the Theil–Sen
// slopes, of which it keeps only those near the median; the Mann–Kendall
// sums are counted in O(MaxWindows log MaxWindows). See docs/detect.md
// for measured figures and the confusion table.
package detect
