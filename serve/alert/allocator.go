package alert

// The rules on the figures of vram's allocator inside a process (libvram's
// statistics channel, docs/channel.md): fragmentation_above and
// allocator_oom. A process not on vram's allocator has no figures: its
// observations are unknown, so it never has an instance, and a firing
// alert of a process that leaves the allocator stays as it is until the
// process leaves the GPU (as a GPU whose memory cannot be read keeps its
// alerts).

import (
	"fmt"

	"github.com/vramhq/vram/internal/units"
	"github.com/vramhq/vram/serve/sample"
)

// allocatorHolds evaluates an allocator rule on p.
func allocatorHolds(rule *Rule, p *sample.Process) (unknown, holds bool) {
	a := p.Alloc
	if a == nil {
		return true, false
	}
	switch rule.When {
	case WhenFragmentationAbove:
		return false, a.Reserved > 0 && uint64(a.Reserved) >= rule.MinBytes && 100*a.Fragmentation() >= rule.Percent
	case WhenAllocatorOOM:
		return false, a.NumOOMs > 0
	}
	return false, false
}

// allocatorMessages writes an allocator rule's messages about p into m.
func allocatorMessages(m *messages, rule *Rule, p *sample.Process) {
	a := p.Alloc
	if a == nil { // resolving a firing alert without figures does not happen (unknown keeps it)
		m.firing, m.resolved = m.subject+" has no allocator figures", m.subject+" has no allocator figures"
		return
	}
	switch rule.When {
	case WhenFragmentationAbove:
		outside := max(a.FreeCached-a.LargestFree, 0)
		figures := fmt.Sprintf("%s: allocator %s fragmented (%s cached free outside the largest free block of %s; %s reserved, %s allocated)",
			m.subject, percent(100*a.Fragmentation()), units.FormatBytes(uint64(outside)), units.FormatBytes(uint64(max(a.LargestFree, 0))),
			units.FormatBytes(uint64(max(a.Reserved, 0))), units.FormatBytes(uint64(max(a.Allocated, 0))))
		m.firing = figures
		if rule.MinBytes > 0 && uint64(max(a.Reserved, 0)) < rule.MinBytes {
			m.resolved = figures + ", under " + units.FormatBytes(rule.MinBytes) + " reserved"
		} else {
			m.resolved = figures + ", under " + percent(rule.Percent) + " again"
		}
	case WhenAllocatorOOM:
		m.firing = fmt.Sprintf("%s: vram's allocator has returned %d out-of-memory errors (%s reserved, %s allocated, cap %s)",
			m.subject, a.NumOOMs, units.FormatBytes(uint64(max(a.Reserved, 0))), units.FormatBytes(uint64(max(a.Allocated, 0))), capText(a.Cap))
		m.resolved = fmt.Sprintf("%s: the allocator's out-of-memory count was reset", m.subject)
	}
}

func capText(c int64) string {
	if c <= 0 {
		return "none"
	}
	return units.FormatBytes(uint64(c))
}
