package gpu

import (
	"fmt"
	"testing"
)

func TestSortedProcesses(t *testing.T) {
	p := func(dev int, pid uint32, mem uint64) Process {
		return Process{Device: dev, PID: pid, Memory: mem, Comm: fmt.Sprint(dev, "/", pid)}
	}
	tests := []struct {
		name  string
		lists [][]Process
		want  []string // Comm of each, in order
	}{
		{"none", nil, nil},
		{"empty lists", [][]Process{{}, {}}, nil},
		{"by memory, largest first", [][]Process{{p(0, 5, 1), p(0, 6, 3)}, {p(1, 7, 2)}}, []string{"0/6", "1/7", "0/5"}},
		{"ties by PID, then device", [][]Process{{p(0, 9, 4), p(0, 3, 4)}, {p(1, 3, 4), p(1, 2, 1)}}, []string{"0/3", "1/3", "0/9", "1/2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := sortedProcesses(tt.lists)
			if len(got) != len(tt.want) {
				t.Fatalf("got %d processes, want %d", len(got), len(tt.want))
			}
			for i, g := range got {
				if g.Comm != tt.want[i] {
					t.Errorf("process %d is %s, want %s", i, g.Comm, tt.want[i])
				}
			}
			if len(tt.want) == 0 && got != nil {
				t.Errorf("got %#v, want nil", got)
			}
		})
	}
}
