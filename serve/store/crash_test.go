package store

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/vramhq/vram/serve/sample"
)

const crashEnv = "VRAM_STORE_CRASH_WRITER"

// crashTick is tick i of the crash test: 8 GPUs, 25 processes each.
func crashTick(i int) Tick {
	tk := Tick{Time: t0.Add(time.Duration(i) * 100 * time.Millisecond)}
	for g := range 8 {
		uuid := fmt.Sprintf("GPU-%d", g)
		tk.Devices = append(tk.Devices, DeviceSample{UUID: uuid, Used: uint64(i), Total: 1 << 40, Util: g})
		for p := range 25 {
			tk.Processes = append(tk.Processes, sample.Process{GPU: uuid, PID: uint32(1000 + p), StartTime: t0, Command: "python worker.py", Bytes: uint64(i)})
		}
	}
	return tk
}

// TestCrashWriter is the child of TestCrashKeepsCommittedTicks: it writes
// ticks until killed and prints the number of each one once committed.
func TestCrashWriter(t *testing.T) {
	path := os.Getenv(crashEnv)
	if path == "" {
		t.Skip("runs only as the child of TestCrashKeepsCommittedTicks")
	}
	ctx := context.Background()
	s, err := Open(ctx, path, Options{})
	if err != nil {
		fmt.Println("open:", err)
		os.Exit(2)
	}
	deadline := time.Now().Add(time.Minute) // never outlive a lost parent
	for i := 0; time.Now().Before(deadline); i++ {
		if err := s.WriteTick(ctx, crashTick(i)); err != nil {
			fmt.Println("write:", err)
			os.Exit(2)
		}
		// Unbuffered: the line leaves the process when WriteTick has
		// returned, so the parent knows tick i was committed.
		os.Stdout.WriteString(strconv.Itoa(i) + "\n")
	}
	os.Exit(3)
}

func TestCrashKeepsCommittedTicks(t *testing.T) {
	if testing.Short() {
		t.Skip("re-executes the test binary")
	}
	path := filepath.Join(t.TempDir(), "history.db")
	for round, killAfter := range []int{150, 40} {
		// Round 2 reopens the file the first child was killed over and
		// starts from tick 0 again: the upserts rewrite the same rows.
		cmd := exec.Command(os.Args[0], "-test.run=^TestCrashWriter$", "-test.v=false")
		cmd.Env = append(os.Environ(), crashEnv+"="+path)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(out)
		last := -1
		for sc.Scan() {
			n, err := strconv.Atoi(sc.Text())
			if err != nil {
				cmd.Process.Kill()
				cmd.Wait()
				t.Fatalf("child: %s", sc.Text())
			}
			last = n
			if n >= killAfter {
				// SIGKILL while the child goes on writing the next tick.
				if err := cmd.Process.Kill(); err != nil {
					t.Fatal(err)
				}
				break
			}
		}
		cmd.Wait()
		if last < killAfter {
			t.Fatalf("round %d: child stopped after tick %d", round, last)
		}

		s, err := Open(context.Background(), path, Options{})
		if err != nil {
			t.Fatalf("reopen after kill: %v", err)
		}
		integrity(t, s.db)
		// Every committed tick is there whole; a tick after it, cut by the
		// kill, is there whole or not at all.
		rows, err := s.db.Query(`SELECT t, count(*) FROM device_samples GROUP BY t ORDER BY t`)
		if err != nil {
			t.Fatal(err)
		}
		have := map[int64]int{}
		for rows.Next() {
			var tm int64
			var n int
			if err := rows.Scan(&tm, &n); err != nil {
				t.Fatal(err)
			}
			have[tm] = n
		}
		rows.Close()
		for i := 0; i <= last; i++ {
			if n := have[ms(crashTick(i).Time)]; n != 8 {
				t.Errorf("round %d: committed tick %d has %d device rows, want 8", round, i, n)
			}
		}
		var procRows, ticks int
		if err := s.db.QueryRow(`SELECT count(*), count(DISTINCT t) FROM process_samples`).Scan(&procRows, &ticks); err != nil {
			t.Fatal(err)
		}
		if procRows != 200*ticks || ticks != len(have) || ticks < last+1 {
			t.Errorf("round %d: %d process rows over %d ticks, %d device ticks, last committed %d", round, procRows, ticks, len(have), last)
		}
		t.Logf("round %d: killed after committed tick %d; %d ticks in the file", round, last, ticks)
		s.Close()
	}
}
