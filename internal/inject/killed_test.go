//go:build linux && amd64

package inject

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// The injector (cudatap's guardian) killed at each phase of a dlopen: the
// target's thread finishes on its own and finds every register, its
// vector state and its signal mask as it left them (the target checks),
// and its interrupted system call goes on.

// injectorEnv runs the test binary as an injector: "PID PATH PHASE" has it
// dlopen PATH into PID, and at PHASE say "at PHASE" and wait to be killed.
const injectorEnv = "INJECT_TEST_INJECTOR"

func runInjector(arg string) int {
	f := strings.Fields(arg)
	pid, _ := strconv.Atoi(f[0])
	path, phase := f[1], f[2]
	d, err := findDl(pid, dlEntries)
	if err != nil {
		fmt.Println("err", err)
		return 1
	}
	_, err = dlopen(pid, d, path, func(p string) {
		if p == phase {
			fmt.Printf("at %s\n", p)
			select {} // until killed
		}
	})
	if err != nil {
		fmt.Println("err", err)
		return 1
	}
	fmt.Println("done")
	return 0
}

// startInjector starts the injector on tg, to be killed at phase, and
// returns once it is there.
func startInjector(t *testing.T, tg *target, lib, phase string) *exec.Cmd {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d %s %s", injectorEnv, tg.pid, lib, phase))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(out).ReadString('\n')
	if line != "at "+phase+"\n" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("injector: %q, want at %s", line, phase)
	}
	return cmd
}

func TestInjectorKilled(t *testing.T) {
	lib := needFixture(t).lib
	phases := []struct {
		phase  string
		loaded bool // the library is loaded once the target goes on
	}{
		{"placed", false},   // the stub written, the thread untouched
		{"slots", false},    // and its data
		{"set", true},       // the thread's registers point at the stub
		{"syscall", true},   // the stub's first system call
		{"marker", true},    // the call made, the stub's last system call
		{"returned", true},  // taken back, in get_signal
		{"restored", true},  // its registers put back, not yet detached
		{"in dlopen", true}, // the library's constructor runs
	}
	for _, mode := range []string{"read", "futex", "epoll", "spin"} {
		for _, p := range phases {
			t.Run(mode+"/"+p.phase, func(t *testing.T) {
				var tg *target
				var injector *exec.Cmd
				if p.phase == "in dlopen" {
					// The constructor holds dlopen until told: kill the
					// injector while it is under way, then let it end.
					hold := filepath.Join(t.TempDir(), "go")
					tg = startHeld(t, mode, hold)
					injector = startInjectorFree(t, tg, lib)
					if line := tg.line(); line != "holding" {
						t.Fatalf("target: %q, want holding", line)
					}
					kill(t, injector)
					if err := os.WriteFile(hold, nil, 0o644); err != nil {
						t.Fatal(err)
					}
				} else {
					tg = start(t, mode)
					injector = startInjector(t, tg, lib, p.phase)
					kill(t, injector)
				}
				got := tg.finish()
				if got != "ok usr1=0 eintr=0" && !(mode == "epoll" && got == "ok usr1=0 eintr=1") {
					t.Errorf("target: %s", got)
				}
				want := ""
				if p.loaded {
					want = "load PID\nunload PID\n"
				}
				if m := tg.markers(); m != want {
					t.Errorf("library markers %q, want %q", m, want)
				}
			})
		}
	}
}

// startHeld starts the target with its library's constructor holding until
// the file hold exists.
func startHeld(t *testing.T, mode, hold string) *target {
	t.Helper()
	t.Setenv("INJECT_TEST_HOLD", hold)
	return start(t, mode)
}

// startInjectorFree starts the injector with no phase to stop at.
func startInjectorFree(t *testing.T, tg *target, lib string) *exec.Cmd {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d %s none", injectorEnv, tg.pid, lib))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd
}

func kill(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
}
