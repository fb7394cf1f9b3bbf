//go:build linux && amd64

package inject

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cudatap/cudatap/internal/procfs"
)

// The tests borrow threads of testdata/target.c, built with the system C
// compiler, and load testdata/lib.c into it. The target checks its own
// registers across every injection and reports.

const libName = "libinjecttest.so"

type fixture struct {
	target, lib string
	static      string // target, linked statically; "" if the toolchain cannot
}

var (
	buildDir  string // removed by TestMain
	buildOnce = sync.OnceValues(build)
)

func TestMain(m *testing.M) {
	if v := os.Getenv(injectorEnv); v != "" {
		os.Exit(runInjector(v)) // the test binary as the injector killed_test.go kills
	}
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

func build() (fixture, error) {
	dir, err := os.MkdirTemp("", "cudatap-inject-")
	if err != nil {
		return fixture{}, err
	}
	buildDir = dir
	f := fixture{target: filepath.Join(dir, "target"), lib: filepath.Join(dir, libName), static: filepath.Join(dir, "target-static")}
	flags := []string{"-O2", "-Wall", "-Wextra", "-Werror", "-pthread"}
	if cpuinfo, err := os.ReadFile("/proc/cpuinfo"); err == nil && bytes.Contains(cpuinfo, []byte(" avx ")) {
		flags = append(flags, "-mavx") // the target then checks all 256 bits of its vector registers
	}
	cc := func(args ...string) error {
		out, err := exec.Command("cc", append(flags, args...)...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("cc %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	src := []string{"testdata/target.c", "testdata/regs.S", "-lm"}
	// -rdynamic exports the target's globals, for Symbol to find.
	if err := cc(append([]string{"-rdynamic", "-o", f.target}, src...)...); err != nil {
		return f, err
	}
	if err := cc("-shared", "-fPIC", "-o", f.lib, "testdata/lib.c"); err != nil {
		return f, err
	}
	if cc(append([]string{"-static", "-o", f.static}, src...)...) != nil {
		f.static = "" // no static C library installed
	}
	return f, nil
}

func needFixture(t *testing.T) fixture {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to ptrace the test programs (CI runs as root): go test -exec sudo ./internal/inject/")
	}
	if _, err := exec.LookPath("cc"); err != nil {
		t.Skip("no C compiler (cc) to build the test programs")
	}
	f, err := buildOnce()
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// target is a running testdata/target.c.
type target struct {
	t      *testing.T
	mode   string
	pid    int
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	out    *bufio.Reader
	marker string // what the library's constructor and destructor write
}

// modes of the target (see testdata/target.c).
var modes = map[string]struct {
	syscall      int64 // the system call the main thread waits in; -1: it spins
	main, parked bool  // the thread pickThread must choose: the main thread? a parked one?
	term         bool  // SIGTERM ends it, not a line on stdin
}{
	"read":     {syscall: sysRead, main: true, parked: true},
	"futex":    {syscall: sysFutex, main: true, parked: true},
	"epoll":    {syscall: sysEpollWait, main: true, parked: true},
	"spin":     {syscall: -1, main: true, term: true},
	"spinread": {syscall: -1, parked: true},
	"exitmain": {syscall: -1, term: true},
	"rseq":     {syscall: -1, main: true, term: true},
}

// start starts the target in mode and returns once its main thread is
// where the mode puts it.
func start(t *testing.T, mode string) *target {
	t.Helper()
	return startProgram(t, needFixture(t).target, mode)
}

func startProgram(t *testing.T, exe, mode string) *target {
	t.Helper()
	tg := &target{t: t, mode: mode, marker: filepath.Join(t.TempDir(), "marker")}
	tg.cmd = exec.Command(exe, mode)
	tg.cmd.Env = append(os.Environ(), "INJECT_TEST_MARKER="+tg.marker)
	// Should the test binary die without its cleanups (a timeout), the
	// target must not outlive it.
	tg.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var err error
	if tg.stdin, err = tg.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := tg.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := tg.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	tg.pid, tg.out = tg.cmd.Process.Pid, bufio.NewReader(stdout)
	t.Cleanup(func() {
		if tg.cmd.ProcessState == nil {
			tg.cmd.Process.Kill()
			tg.cmd.Wait()
		}
	})
	switch line := tg.line(); line {
	case "ready":
	case "no rseq":
		t.Skip("glibc registered no rseq area for the target's threads")
	default:
		t.Fatalf("target %s: %q, want ready", mode, line)
	}
	// "ready" comes just before the wait: wait for the main thread to be
	// in it, so that the injection finds it there.
	if mode == "exitmain" {
		tg.until(func() bool { st, err := procfs.Stat(tg.pid); return err == nil && st.State == 'Z' })
	}
	switch m := modes[mode]; {
	case m.syscall >= 0:
		tg.until(func() bool { n, _, ok := threadSyscall(tg.pid, tg.pid); return ok && n == m.syscall })
	default:
		spinning, err := Symbol(tg.pid, filepath.Base(exe), "spinning")
		if err != nil {
			t.Fatal(err)
		}
		tg.until(func() bool {
			var b [4]byte
			tid, err := liveThread(tg.pid) // in exitmain, the main thread took its view of memory with it
			return err == nil && procfs.ReadMem(tid, spinning, b[:]) == nil && b != [4]byte{}
		})
	}
	if mode == "spinread" {
		tg.until(func() bool { _, parked, _ := pickThread(tg.pid); return parked })
	}
	return tg
}

// until polls cond: a wait for a condition of the target, not for time.
func (tg *target) until(cond func() bool) {
	for !cond() {
		time.Sleep(time.Millisecond)
	}
}

func (tg *target) line() string {
	tg.t.Helper()
	line, err := tg.out.ReadString('\n')
	if err != nil {
		tg.t.Fatalf("target %s: read its output: %q, %v", tg.mode, line, err)
	}
	return strings.TrimSuffix(line, "\n")
}

// finish ends the target's wait, and checks it found everything as it was.
// It returns the target's report, "ok usr1=N eintr=N".
func (tg *target) finish() string {
	tg.t.Helper()
	if modes[tg.mode].term {
		tg.cmd.Process.Signal(syscall.SIGTERM)
	} else if _, err := io.WriteString(tg.stdin, "go\n"); err != nil {
		tg.t.Fatal(err)
	}
	line := tg.line()
	if err := tg.cmd.Wait(); err != nil || !strings.HasPrefix(line, "ok ") {
		tg.t.Fatalf("target %s after injection: %q, %v", tg.mode, line, err)
	}
	return line
}

// markers returns the lines the library's constructor and destructor
// wrote, with the target's pid replaced by "PID".
func (tg *target) markers() string {
	tg.t.Helper()
	b, err := os.ReadFile(tg.marker)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		tg.t.Fatal(err)
	}
	return strings.ReplaceAll(string(b), strconv.Itoa(tg.pid), "PID")
}

func (tg *target) mapped(lib string) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", tg.pid))
	if err != nil {
		tg.t.Fatal(err)
	}
	return bytes.Contains(b, []byte(lib))
}

func (tg *target) symbol(name string) uint64 {
	tg.t.Helper()
	addr, err := Symbol(tg.pid, libName, name)
	if err != nil {
		tg.t.Fatal(err)
	}
	return addr
}

// Dlopen and Call on a thread in each state a thread can be found in; the
// target checks every register of its waiting thread across all of it.
func TestDlopenCall(t *testing.T) {
	for _, mode := range []string{"read", "futex", "epoll", "spin", "spinread", "exitmain"} {
		t.Run(mode, func(t *testing.T) {
			tg := start(t, mode)
			tid, parked, err := pickThread(tg.pid)
			if m := modes[mode]; err != nil || (tid == tg.pid) != m.main || parked != m.parked {
				t.Errorf("pickThread = %d, parked %v, %v; want the main thread %v, parked %v (pid %d)", tid, parked, err, m.main, m.parked, tg.pid)
			}

			h, err := Dlopen(tg.pid, needFixture(t).lib)
			if err != nil || h == 0 {
				t.Fatalf("Dlopen = %#x, %v", h, err)
			}
			if got := tg.markers(); got != "load PID\n" {
				t.Errorf("constructor wrote %q, want %q", got, "load PID\n")
			}
			if mode == "futex" {
				// Its timed wait goes on in restart_syscall, still parked.
				tg.until(func() bool { n, _, ok := threadSyscall(tg.pid, tg.pid); return ok && n == sysRestartSyscall })
				if tid, parked, err := pickThread(tg.pid); tid != tg.pid || !parked {
					t.Errorf("pickThread after a restart = %d, parked %v, %v; want the main thread, parked", tid, parked, err)
				}
			}
			got, err := Call(tg.pid, tg.symbol("inject_test_add"), 1, 10, 100, 1000, 10000, 1<<40)
			if want := uint64(1 + 20 + 300 + 4000 + 50000 + 6<<40); err != nil || got != want {
				t.Errorf("Call(inject_test_add) = %d, %v; want %d", got, err, want)
			}
			// The spinning threads run with DF set; a call must not.
			if df, err := Call(tg.pid, tg.symbol("inject_test_df")); err != nil || df != 0 {
				t.Errorf("Call(inject_test_df) = %d, %v; want DF clear in the callee", df, err)
			}
			t.Logf("target: %s", tg.finish())
		})
	}
}

// A stopped process (SIGSTOP) can be injected into, and stays stopped.
func TestStopped(t *testing.T) {
	tg := start(t, "read")
	stopped := func() bool { st, err := procfs.Stat(tg.pid); return err == nil && st.State == 'T' }
	tg.cmd.Process.Signal(syscall.SIGSTOP)
	tg.until(stopped)
	if _, err := Dlopen(tg.pid, needFixture(t).lib); err != nil {
		t.Fatal(err)
	}
	tg.until(stopped) // the borrowed thread rejoins the group stop
	tg.cmd.Process.Signal(syscall.SIGCONT)
	if got := tg.finish(); got != "ok usr1=0 eintr=0" {
		t.Errorf("target: %s", got)
	}
	if got := tg.markers(); got != "load PID\nunload PID\n" {
		t.Errorf("markers %q", got)
	}
}

// A thread caught inside a restartable sequence is let go: the target
// checks that its sequence stayed armed.
func TestRseq(t *testing.T) {
	tg := start(t, "rseq")
	_, err := Dlopen(tg.pid, needFixture(t).lib)
	if err != nil && !errors.Is(err, errInRseq) {
		t.Fatal(err)
	}
	t.Logf("Dlopen: %v (the thread is in the sequence but for a few instructions)", err)
	if got := tg.finish(); got != "ok usr1=0 eintr=0" {
		t.Errorf("target: %s", got)
	}
}

// A static binary has no dlopen to call.
func TestStatic(t *testing.T) {
	f := needFixture(t)
	if f.static == "" {
		t.Skip("cc -static failed: no static C library")
	}
	tg := startProgram(t, f.static, "read")
	if _, err := Dlopen(tg.pid, f.lib); !errors.Is(err, ErrNoDlopen) {
		t.Errorf("Dlopen into a static binary: %v, want ErrNoDlopen", err)
	}
	tg.finish()
}

func TestDlopenError(t *testing.T) {
	tg := start(t, "read")
	const missing = "/nonexistent/libmissing.so"
	h, err := Dlopen(tg.pid, missing)
	// dlerror's own words.
	if want := missing + ": cannot open shared object file: No such file or directory"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("Dlopen(%s) = %#x, %v; want an error containing %q", missing, h, err, want)
	}
	if got := tg.finish(); got != "ok usr1=0 eintr=0" {
		t.Errorf("target: %s", got)
	}
}

func TestDlclose(t *testing.T) {
	tg := start(t, "read")
	lib := needFixture(t).lib
	h, err := Dlopen(tg.pid, lib)
	if err != nil {
		t.Fatal(err)
	}
	if !tg.mapped(lib) {
		t.Fatalf("%s not mapped after Dlopen", lib)
	}
	if err := Dlclose(tg.pid, h); err != nil {
		t.Fatal(err)
	}
	if tg.mapped(lib) {
		t.Errorf("%s still mapped after Dlclose", lib)
	}
	if got, want := tg.markers(), "load PID\nunload PID\n"; got != want {
		t.Errorf("markers %q, want %q", got, want)
	}
	tg.finish()
}

// Many injections in a row, into a thread found parked and into one found
// running.
func TestRepeat(t *testing.T) {
	const n = 50
	for _, mode := range []string{"read", "spin"} {
		t.Run(mode, func(t *testing.T) {
			tg := start(t, mode)
			lib := needFixture(t).lib
			for i := range n {
				h, err := Dlopen(tg.pid, lib)
				if err != nil {
					t.Fatalf("Dlopen #%d: %v", i, err)
				}
				if err := Dlclose(tg.pid, h); err != nil {
					t.Fatalf("Dlclose #%d: %v", i, err)
				}
			}
			if got, want := tg.markers(), strings.Repeat("load PID\nunload PID\n", n); got != want {
				t.Errorf("markers %q, want %d load/unload pairs", got, n)
			}
			tg.finish()
		})
	}
}

// A signal raised during a call waits, and is delivered to the target's
// handler once the thread is back in its read, which then restarts
// (SA_RESTART).
func TestSignalKept(t *testing.T) {
	tg := start(t, "read")
	if _, err := Dlopen(tg.pid, needFixture(t).lib); err != nil {
		t.Fatal(err)
	}
	// It returns the SIGUSR1s handled by the time raise returned.
	if n, err := Call(tg.pid, tg.symbol("inject_test_raise"), uint64(syscall.SIGUSR1)); err != nil || n != 0 {
		t.Fatalf("Call(inject_test_raise) = %d, %v; want 0: no handler run during the call", int32(n), err)
	}
	if got := tg.finish(); got != "ok usr1=1 eintr=0" {
		t.Errorf("target: %s, want one SIGUSR1 handled", got)
	}
}

// A call that faults is reported, and the target lives on, unharmed.
func TestCrash(t *testing.T) {
	tg := start(t, "read")
	if _, err := Dlopen(tg.pid, needFixture(t).lib); err != nil {
		t.Fatal(err)
	}
	crash := tg.symbol("inject_test_crash")
	_, err := Call(tg.pid, crash)
	if !errors.Is(err, ErrCrashed) || !strings.Contains(err.Error(), "SIGSEGV") {
		t.Fatalf("Call(inject_test_crash): %v, want ErrCrashed with SIGSEGV", err)
	}
	t.Log(err)
	if got, err := Call(tg.pid, tg.symbol("inject_test_add"), 1, 1, 1, 1, 1, 1); err != nil || got != 21 {
		t.Errorf("Call after the crash = %d, %v; want 21", got, err)
	}
	if got := tg.finish(); got != "ok usr1=0 eintr=0" {
		t.Errorf("target: %s", got)
	}
}

// The target killed while a call runs in it.
func TestKilledDuringCall(t *testing.T) {
	tg := start(t, "read")
	if _, err := Dlopen(tg.pid, needFixture(t).lib); err != nil {
		t.Fatal(err)
	}
	block := tg.symbol("inject_test_block")
	done := make(chan error)
	go func() {
		_, err := Call(tg.pid, block)
		done <- err
	}()
	if line := tg.line(); line != "blocked" {
		t.Fatalf("target: %q, want blocked", line)
	}
	tg.cmd.Process.Kill()
	if err := <-done; !errors.Is(err, ErrNoProcess) {
		t.Errorf("Call into a killed process: %v, want ErrNoProcess", err)
	}
}

// glibc before 2.34 had no dlopen in libc, and __libc_dlopen_mode reports
// no error through dlerror. The test library stands in for it.
func TestOldGlibcEntryPoints(t *testing.T) {
	tg := start(t, "read")
	lib := needFixture(t).lib
	h, err := Dlopen(tg.pid, lib)
	if err != nil {
		t.Fatal(err)
	}
	d, err := findDl(tg.pid, []dlEntry{{lib: libName, open: "__libc_dlopen_mode", close: "__libc_dlclose", mode: rtldNow | rtldDlopen}})
	if err != nil {
		t.Fatal(err)
	}
	if h2, err := dlopen(tg.pid, d, lib, nil); err != nil || h2 != h {
		t.Errorf("dlopen through __libc_dlopen_mode = %#x, %v; want the handle %#x", h2, err, h)
	}
	if _, err := dlopen(tg.pid, d, "/nonexistent/lib.so", nil); err == nil || !strings.Contains(err.Error(), "does not say why") {
		t.Errorf("failed dlopen through __libc_dlopen_mode: %v", err)
	}
	tg.finish()
}

func TestNoProcess(t *testing.T) {
	needFixture(t)
	b, err := os.ReadFile("/proc/sys/kernel/pid_max")
	if err != nil {
		t.Fatal(err)
	}
	max, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	pid := max + 1 // no process has this pid, ever
	_, err1 := Dlopen(pid, "/lib.so")
	_, err2 := Call(pid, 0x1000)
	err3 := Dlclose(pid, 1)
	_, err4 := Symbol(pid, "libc.so.6", "dlopen")
	for i, err := range []error{err1, err2, err3, err4} {
		if !errors.Is(err, ErrNoProcess) || !strings.Contains(err.Error(), strconv.Itoa(pid)) {
			t.Errorf("call %d: %v, want ErrNoProcess naming pid %d", i+1, err, pid)
		}
	}
	t.Log(err2)
}

func TestParked(t *testing.T) {
	var none [6]uint64
	sigmask := [6]uint64{0, 0, 0, 0x7ffc0000, 0x7ffc0000, 0x7ffc0000}
	for _, c := range []struct {
		nr   int64
		args [6]uint64
		want int
	}{
		{sysRead, none, restartsOK},
		{sysFutex, none, restartsOK},
		{sysPpoll, none, restartsOK},
		{sysPpoll, sigmask, notParked},    // with its own signal mask
		{sysPselect6, none, restartsOK},   // glibc's select
		{sysPselect6, sigmask, notParked}, // pselect
		{sysRestartSyscall, none, restartsOK},
		{sysEpollWait, none, restartsEINTR},
		{sysEpollPwait, sigmask, notParked},
		{sysRtSigsuspend, none, notParked},
		{16, none, notParked}, // ioctl
		{-1, none, notParked},
	} {
		if got := parked(c.nr, c.args); got != c.want {
			t.Errorf("parked(%d, %#x) = %d, want %d", c.nr, c.args, got, c.want)
		}
	}
}
