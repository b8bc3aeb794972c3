package scripts

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestPythonScripts runs the unit tests of the Python scripts under gpu/
// (gpu/*_test.py, standard library only), so that the project's test
// command covers them; the scripts themselves run on the GPU host.
func TestPythonScripts(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3 on PATH: the tests of gpu/*.py need it")
	}
	cmd := exec.Command(py, "-m", "unittest", "discover", "-v", "-s", "gpu", "-p", "*_test.py")
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	// discover finds nothing silently when the pattern matches no file.
	if !strings.Contains(string(out), "\nOK") || strings.Contains(string(out), "Ran 0 tests") {
		t.Fatalf("no Python test ran:\n%s", out)
	}
	t.Logf("%s", out)
}
