package symbolize

import (
	"bufio"
	"debug/elf"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/cudatap/cudatap/internal/testutil"
)

// The test fixtures are compiled from source with the system C/C++
// compiler: a C++ shared library with template instantiations and versioned
// symbols, and a C program linked against it (PIE and non-PIE) that prints
// addresses of its own and the library's functions.

const libSource = `
namespace ns {
template <typename T> T twice(T x) { return x + x; }
template int twice<int>(int);
template double twice<double>(double);
struct Widget { int poke(int); };
int Widget::poke(int x) { return x * 3; }
}

extern "C" {
int foo_old(int x) { return x + 1; }
int foo_new(int x) { return x + 2; }
__asm__(".symver foo_old,foo@LIBT_1.0");
__asm__(".symver foo_new,foo@@LIBT_2.0");

int lib_plain(int x) { return x * 7 + 1; }
int lib_data[16] = {1};

__attribute__((noinline, used)) static int local_helper(int x) { return x ^ 0x55; }
int call_local(int x) { return local_helper(x) + 1; }

void *lib_twice_addr(void) { return (void *)&ns::twice<int>; }
}
`

const libVersionScript = `
LIBT_1.0 {
  global:
    lib_plain; lib_data; lib_twice_addr; call_local;
    extern "C++" { *ns::*; };
  local: *;
};
LIBT_2.0 {
} LIBT_1.0;
`

const mainSource = `
#include <stdio.h>
#include <unistd.h>

extern void *lib_twice_addr(void);
extern int lib_plain(int);

__attribute__((noinline)) int main_marker(int x) { return x * 11 + 3; }

int main(void) {
	printf("%p %p %p\n", (void *)&main_marker, lib_twice_addr(), (void *)&lib_plain);
	fflush(stdout);
	char buf[64];
	while (read(0, buf, sizeof buf) > 0) {
	}
	return main_marker(1) == 0;
}
`

// fixtures are the compiled test programs.
type fixtures struct {
	dir      string
	lib      string // libtwice.so
	stripped string // stripped copy of lib
	pie      string // PIE executable linked against lib
	nopie    string // non-PIE executable linked against lib
}

var (
	fixOnce sync.Once
	fix     *fixtures
	fixErr  error
	fixDir  string // set by TestMain: the test binary's build directory
)

func TestMain(m *testing.M) {
	var err error
	if fixDir, err = testutil.BuildDir("symbolize"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	testutil.Main(m)
}

func compiler(tb testing.TB, name string) string {
	tb.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		tb.Skipf("no %s compiler in PATH, skipping tests that need compiled fixtures", name)
	}
	return path
}

func runCmd(dir, name string, args ...string) error {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return nil
}

// getFixtures builds the fixtures once per test binary.
func getFixtures(tb testing.TB) *fixtures {
	tb.Helper()
	cc, cxx := compiler(tb, "cc"), compiler(tb, "g++")
	fixOnce.Do(func() {
		d := fixDirOrTemp()
		f := &fixtures{
			dir:      d,
			lib:      filepath.Join(d, "libtwice.so"),
			stripped: filepath.Join(d, "libtwice-stripped.so"),
			pie:      filepath.Join(d, "main-pie"),
			nopie:    filepath.Join(d, "main-nopie"),
		}
		write := func(name, s string) {
			if fixErr == nil {
				fixErr = os.WriteFile(filepath.Join(d, name), []byte(s), 0o644)
			}
		}
		write("lib.cpp", libSource)
		write("lib.map", libVersionScript)
		write("main.c", mainSource)
		steps := [][]string{
			{cxx, "-O1", "-g0", "-fPIC", "-shared", "-Wl,--build-id", "-Wl,--version-script=lib.map", "-o", f.lib, "lib.cpp"},
			{"objcopy", "--strip-all", f.lib, f.stripped},
			{cc, "-O1", "-fPIE", "-pie", "-Wl,--build-id", "-o", f.pie, "main.c", "-L.", "-ltwice", "-Wl,-rpath," + d},
			{cc, "-O1", "-fno-pie", "-no-pie", "-Wl,--build-id", "-o", f.nopie, "main.c", "-L.", "-ltwice", "-Wl,-rpath," + d},
		}
		for _, s := range steps {
			if fixErr == nil {
				fixErr = runCmd(d, s[0], s[1:]...)
			}
		}
		fix = f
	})
	if fixErr != nil {
		tb.Fatalf("building fixtures: %v", fixErr)
	}
	return fix
}

// child is a running fixture program.
type child struct {
	cmd                          *exec.Cmd
	stdin                        io.WriteCloser
	mainAddr, twiceAddr, libAddr uint64
}

// startChild runs exe, which prints the runtime addresses of main_marker,
// ns::twice<int> and lib_plain, then waits for its stdin to close.
func startChild(tb testing.TB, exe string) *child {
	tb.Helper()
	cmd := exec.Command(exe)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	c := &child{cmd: cmd, stdin: stdin}
	tb.Cleanup(func() {
		stdin.Close()
		cmd.Wait()
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		tb.Fatalf("reading child output: %v", err)
	}
	var addrs []uint64
	for _, f := range strings.Fields(line) {
		v, err := strconv.ParseUint(strings.TrimPrefix(f, "0x"), 16, 64)
		if err != nil {
			tb.Fatalf("child printed %q: %v", line, err)
		}
		addrs = append(addrs, v)
	}
	if len(addrs) != 3 {
		tb.Fatalf("child printed %q, want 3 addresses", line)
	}
	c.mainAddr, c.twiceAddr, c.libAddr = addrs[0], addrs[1], addrs[2]
	return c
}

// elfSymbols returns the symbols of path as debug/elf reads them, by name
// (without version suffixes), the first definition winning.
func elfSymbols(tb testing.TB, path string, dynamic bool) map[string]elf.Symbol {
	tb.Helper()
	ef, err := elf.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer ef.Close()
	var syms []elf.Symbol
	if dynamic {
		syms, err = ef.DynamicSymbols()
	} else {
		syms, err = ef.Symbols()
	}
	if err != nil {
		tb.Fatal(err)
	}
	m := make(map[string]elf.Symbol)
	for _, s := range syms {
		if s.Section == elf.SHN_UNDEF || s.Name == "" {
			continue
		}
		name, _ := splitVersion(s.Name)
		if _, ok := m[name]; !ok {
			m[name] = s
		}
	}
	return m
}

// expectedFileOffset computes vaddr's file offset independently of File.
func expectedFileOffset(tb testing.TB, path string, vaddr uint64) uint64 {
	tb.Helper()
	ef, err := elf.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer ef.Close()
	for _, p := range ef.Progs {
		if p.Type == elf.PT_LOAD && vaddr >= p.Vaddr && vaddr < p.Vaddr+p.Filesz {
			return vaddr - p.Vaddr + p.Off
		}
	}
	tb.Fatalf("%#x not in any PT_LOAD of %s", vaddr, path)
	return 0
}
