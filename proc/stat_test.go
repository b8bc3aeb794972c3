package proc

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func FuzzParseStat(f *testing.F) {
	f.Add("1234 (python3) S 1 1234 1234 0 -1 4194560 100 0 0 0 5 3 0 0 20 0 4 0 987654 0 0")
	f.Add("7 (a) b) (c) R 6 7 7 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 42 0 0")
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		st, err := ParseStat([]byte(s))
		if err == nil && len(st.State) != 1 {
			t.Fatalf("parsed %q with state %q", s, st.State)
		}
	})
}

func TestParseStat(t *testing.T) {
	st, err := ParseStat([]byte("7 (a) b) (c) R 6 5 4 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 42 0 0\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := Stat{PID: 7, PPID: 6, Session: 4, State: "R", Comm: "a) b) (c", StartTicks: 42}
	if st != want {
		t.Errorf("parsed %+v, want %+v", st, want)
	}
	for _, bad := range []string{
		"",
		"12 python S 1",
		"x (p) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20",
		"1 (p) S 1 2",
		"1 (p) SS 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19",
		"1 (p) S x 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19",
		"1 (p) S 1 2 x 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19",
		"1 (p) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 -1",
	} {
		if _, err := ParseStat([]byte(bad)); err == nil {
			t.Errorf("ParseStat(%q) did not fail", bad)
		}
	}
}

func TestReadStat(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "31"), 0o755); err != nil {
		t.Fatal(err)
	}
	line := "31 (python3) S 30 31 29 0 -1 4194304 100 0 0 0 10 5 0 0 20 0 1 0 5000 1000000 100\n"
	if err := os.WriteFile(filepath.Join(root, "31", "stat"), []byte(line), 0o644); err != nil {
		t.Fatal(err)
	}
	st, buf, err := ReadStat(root, 31, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := (Stat{PID: 31, PPID: 30, Session: 29, State: "S", Comm: "python3", StartTicks: 5000}); st != want {
		t.Errorf("ReadStat = %+v, want %+v", st, want)
	}
	if cap(buf) < len(line) {
		t.Errorf("scratch buffer of %d bytes returned", cap(buf))
	}
	if _, _, err := ReadStat(root, 32, buf); err != ErrNoProcess {
		t.Errorf("ReadStat of a missing PID: err = %v, want ErrNoProcess", err)
	}
	if err := os.WriteFile(filepath.Join(root, "31", "stat"), []byte("31 python3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ReadStat(root, 31, buf); err == nil || errors.Is(err, ErrNoProcess) {
		t.Errorf("ReadStat of a malformed stat: err = %v, want a parse error", err)
	}
}

func TestStarted(t *testing.T) {
	boot := time.Unix(1764460800, 0)
	if got, want := Started(boot, 250), boot.Add(2500*time.Millisecond); !got.Equal(want) {
		t.Errorf("Started(boot, 250) = %v, want %v", got, want)
	}
}
