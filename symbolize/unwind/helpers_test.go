package unwind

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/cudatap/cudatap/internal/testutil"
	"github.com/cudatap/cudatap/symbolize"
)

// The fixtures are compiled from testdata/chain.c and testdata/lib.c with
// the system C compiler, without frame pointers, in several variants.

// cflags are what CPython and PyTorch builds effectively use.
var cflags = []string{"-O2", "-fomit-frame-pointer", "-fasynchronous-unwind-tables"}

// variant is one way of building the fixture.
type variant struct {
	name     string
	exe      []string // extra flags for the executable
	lib      []string // extra flags for the shared library
	noHdr    bool     // linked without .eh_frame_hdr
	nonPIE   bool
	optional bool // skip, rather than fail, if the toolchain cannot build it
}

var variants = []variant{
	{name: "pie", exe: []string{"-fPIE", "-pie"}},
	{name: "nopie", exe: []string{"-fno-pie", "-no-pie"}, nonPIE: true},
	{name: "nohdr", exe: []string{"-fPIE", "-pie", "-Wl,--no-eh-frame-hdr"}, lib: []string{"-Wl,--no-eh-frame-hdr"}, noHdr: true},
	// Intel CET: endbr64 everywhere and PLTs with a different CFA expression.
	{name: "ibt", exe: []string{"-fPIE", "-pie", "-fcf-protection=full", "-Wl,-z,ibtplt"}, lib: []string{"-fcf-protection=full", "-Wl,-z,ibtplt"}, optional: true},
}

var (
	builtMu sync.Mutex
	built   = map[string]error{}
)

func TestMain(m *testing.M) { testutil.Main(m) }

// fixture builds variant v (once per test binary) and returns the path of
// its executable.
func fixture(tb testing.TB, v variant) string {
	tb.Helper()
	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
		tb.Skip("the fixtures are x86-64 Linux programs")
	}
	cc, err := exec.LookPath("gcc")
	if err != nil {
		if cc, err = exec.LookPath("cc"); err != nil {
			tb.Skip("no C compiler: cannot build the test programs")
		}
	}
	dir, err := testutil.BuildDir("unwind-" + v.name)
	if err != nil {
		tb.Fatal(err)
	}
	exe := filepath.Join(dir, "chain")
	builtMu.Lock()
	defer builtMu.Unlock()
	err, done := built[v.name]
	if !done {
		err = build(cc, dir, v)
		built[v.name] = err
	}
	if err != nil && v.optional {
		tb.Skipf("cannot build the %s fixture: %v", v.name, err)
	}
	if err != nil {
		tb.Fatalf("building %s fixture: %v", v.name, err)
	}
	return exe
}

func build(cc, dir string, v variant) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	run := func(args ...string) error {
		out, err := exec.Command(cc, args...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%s %s: %v\n%s", cc, strings.Join(args, " "), err, out)
		}
		return nil
	}
	lib := append(append(clone(cflags), "-fPIC", "-shared", "-o", filepath.Join(dir, "libuwlib.so"), "testdata/lib.c"), v.lib...)
	if err := run(lib...); err != nil {
		return err
	}
	exe := append(append(clone(cflags), v.exe...), "-o", filepath.Join(dir, "chain"), "testdata/chain.c",
		"-L"+dir, "-luwlib", "-Wl,-rpath,"+dir)
	return run(exe...)
}

func clone(s []string) []string { return append([]string(nil), s...) }

// capture is a snapshot taken by a running fixture process.
type capture struct {
	pid     int
	regs    Regs
	stack   []byte
	faultPC uint64 // signal mode: the pc the signal interrupted
	proc    *symbolize.Process
}

// runFixture starts exe with the given recursion depth (and mode, see
// chain.c), waits for its snapshot and returns it. The process stays alive
// until the test ends.
func runFixture(tb testing.TB, exe string, depth int, mode ...string) *capture {
	tb.Helper()
	out := filepath.Join(tb.TempDir(), "snap")
	cmd := exec.Command(exe, append([]string{out, strconv.Itoa(depth)}, mode...)...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		stdin.Close()
		if err := cmd.Wait(); err != nil {
			tb.Errorf("fixture: %v", err)
		}
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "ready") {
		tb.Fatalf("fixture did not get ready: %q, %v", line, err)
	}
	go io.Copy(io.Discard, stdout)
	data, err := os.ReadFile(out)
	if err != nil {
		tb.Fatal(err)
	}
	const hdr = 40
	if len(data) < hdr {
		tb.Fatalf("short snapshot: %d bytes", len(data))
	}
	c := &capture{pid: cmd.Process.Pid}
	c.regs.RIP = binary.LittleEndian.Uint64(data[0:])
	c.regs.RSP = binary.LittleEndian.Uint64(data[8:])
	c.regs.RBP = binary.LittleEndian.Uint64(data[16:])
	n := binary.LittleEndian.Uint64(data[24:])
	c.faultPC = binary.LittleEndian.Uint64(data[32:])
	if n != uint64(len(data)-hdr) {
		tb.Fatalf("snapshot says %d bytes of stack, has %d", n, len(data)-hdr)
	}
	c.stack = data[hdr:]
	if c.proc, err = symbolize.NewProcess(c.pid, nil); err != nil {
		tb.Fatal(err)
	}
	return c
}

// names symbolizes the frames of an unwind: the first as is, the others
// as return addresses.
func names(p *symbolize.Process, pcs []uint64) []string {
	var out []string
	for i, pc := range pcs {
		if i > 0 {
			pc--
		}
		out = append(out, p.Symbolize(pc).Function)
	}
	return out
}

// expectedChain is what the fixture's stack must unwind to, innermost
// first, down to main.
func expectedChain(depth int) []string {
	want := []string{"uw_capture", "uw_leaf", "uwlib_inner", "uwlib_call", "uw_alloca"}
	for range depth {
		want = append(want, "uw_rec")
	}
	return append(want, "uw_rec", "uw_outer", "main")
}
