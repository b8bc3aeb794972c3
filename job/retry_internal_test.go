package job

import "testing"

func TestNextBatch(t *testing.T) {
	for _, tt := range []struct {
		name     string
		last     int
		capacity float64
		pts      []needPoint
		want     int
		why      string
	}{
		{"no capacity", 100, 0, []needPoint{{100, 20 * gib}}, 50, "halve"},
		{"no need", 100, 10 * gib, nil, 50, "halve"},
		{"scaled", 100, 10 * gib, []needPoint{{100, 20 * gib}}, 45, "capacity"},
		{"scaled from the smallest batch", 50, 10 * gib, []needPoint{{100, 20 * gib}, {50, 20 * gib}}, 22, "capacity"},
		// A process that fails holds the capacity: its need is hardly
		// more, the line through two needs starts at the capacity, and
		// the second scaling is no better than the first.
		{"after a scaled batch failed, at most half", 90, 10 * gib, []needPoint{{100, 11 * gib}, {90, 10.9 * gib}}, 45, "halve"},
		// need = 2 GiB + 0.1 GiB·batch: (10−2)/0.1 = 80, less 10 %.
		{"line", 100, 10 * gib, []needPoint{{200, 22 * gib}, {100, 12 * gib}}, 72, "line"},
		{"figures that say the failure fits", 100, 10 * gib, []needPoint{{100, 5 * gib}}, 50, "halve"},
		{"never below 1", 2, 10 * gib, []needPoint{{2, 100 * gib}}, 1, "capacity"},
		{"halving 1", 1, 0, nil, 1, "halve"},
	} {
		got, why := nextBatch(tt.last, tt.capacity, tt.pts, DefaultRetryMargin)
		if got != tt.want || why != tt.why {
			t.Errorf("%s: %d (%s), want %d (%s)", tt.name, got, why, tt.want, tt.why)
		}
	}
}
