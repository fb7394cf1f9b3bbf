package testutil

import (
	"bufio"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// The ELF fixtures are compiled from source with the system C/C++
// compiler: a C++ shared library with template instantiations and versioned
// symbols, and a C program linked against it (PIE and non-PIE) that prints
// addresses of its own and the library's functions. internal/objfile tests
// reading them, symbolize tests naming addresses in running copies.

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

// ELFFixtures are the compiled test programs.
type ELFFixtures struct {
	Dir      string
	Lib      string // libtwice.so
	Stripped string // stripped copy of Lib
	PIE      string // PIE executable linked against Lib
	NoPIE    string // non-PIE executable linked against Lib
}

var elfBuild = sync.OnceValues(func() (*ELFFixtures, error) {
	d, err := BuildDir("elf")
	if err != nil {
		return nil, err
	}
	cc, err := exec.LookPath("cc")
	if err != nil {
		return nil, err
	}
	cxx, err := exec.LookPath("g++")
	if err != nil {
		return nil, err
	}
	f := &ELFFixtures{
		Dir:      d,
		Lib:      filepath.Join(d, "libtwice.so"),
		Stripped: filepath.Join(d, "libtwice-stripped.so"),
		PIE:      filepath.Join(d, "main-pie"),
		NoPIE:    filepath.Join(d, "main-nopie"),
	}
	for name, s := range map[string]string{"lib.cpp": libSource, "lib.map": libVersionScript, "main.c": mainSource} {
		if err := os.WriteFile(filepath.Join(d, name), []byte(s), 0o644); err != nil {
			return nil, err
		}
	}
	steps := [][]string{
		{cxx, "-O1", "-g0", "-fPIC", "-shared", "-Wl,--build-id", "-Wl,--version-script=lib.map", "-o", f.Lib, "lib.cpp"},
		{"objcopy", "--strip-all", f.Lib, f.Stripped},
		{cc, "-O1", "-fPIE", "-pie", "-Wl,--build-id", "-o", f.PIE, "main.c", "-L.", "-ltwice", "-Wl,-rpath," + d},
		{cc, "-O1", "-fno-pie", "-no-pie", "-Wl,--build-id", "-o", f.NoPIE, "main.c", "-L.", "-ltwice", "-Wl,-rpath," + d},
	}
	for _, s := range steps {
		if err := Run(d, s[0], s[1:]...); err != nil {
			return nil, err
		}
	}
	return f, nil
})

// ELF builds the ELF fixtures once per test binary. Without a C and a C++
// compiler it skips the test.
func ELF(tb testing.TB) *ELFFixtures {
	tb.Helper()
	Compiler(tb, "cc")
	Compiler(tb, "g++")
	f, err := elfBuild()
	if err != nil {
		tb.Fatalf("building ELF fixtures: %v", err)
	}
	return f
}

// Compiler is the path of a compiler; without it the test is skipped.
func Compiler(tb testing.TB, name string) string {
	tb.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		tb.Skipf("no %s compiler in PATH, skipping tests that need compiled fixtures", name)
	}
	return path
}

// Run runs a command in dir, returning its output with the error.
func Run(dir, name string, args ...string) error {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return nil
}

// Child is a running fixture program (ELFFixtures.PIE or NoPIE).
type Child struct {
	Cmd                          *exec.Cmd
	MainAddr, TwiceAddr, LibAddr uint64 // main_marker, ns::twice<int>, lib_plain
}

// StartChild runs exe, which prints the runtime addresses of main_marker,
// ns::twice<int> and lib_plain, then waits for its stdin to close: at the
// end of the test.
func StartChild(tb testing.TB, exe string) *Child {
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
	return &Child{Cmd: cmd, MainAddr: addrs[0], TwiceAddr: addrs[1], LibAddr: addrs[2]}
}

// Pid is the child's process id.
func (c *Child) Pid() int { return c.Cmd.Process.Pid }

// FileOffset computes vaddr's file offset in the ELF file at path with
// debug/elf, independently of the code under test.
func FileOffset(tb testing.TB, path string, vaddr uint64) uint64 {
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
