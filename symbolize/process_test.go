package symbolize

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cudatap/cudatap/internal/objfile"
	"github.com/cudatap/cudatap/internal/testutil"
)

// TestProcessSymbolize names addresses in running PIE and non-PIE
// programs. The /proc/PID/root fallback that unprivileged tracers get in
// place of /proc/PID/map_files is internal/objfile's TestOpenPathLive.
func TestProcessSymbolize(t *testing.T) {
	fx := testutil.ELF(t)
	for _, exe := range []string{fx.PIE, fx.NoPIE} {
		t.Run(filepath.Base(exe), func(t *testing.T) { testProcessSymbolize(t, fx, exe) })
	}
}

func testProcessSymbolize(t *testing.T, fx *testutil.ELFFixtures, exe string) {
	c := testutil.StartChild(t, exe)
	p, err := NewProcess(c.Pid(), objfile.NewCache(16))
	if err != nil {
		t.Fatal(err)
	}

	fr := p.Symbolize(c.MainAddr)
	if fr.Function != "main_marker" || fr.Raw != "main_marker" || fr.Offset != 0 || fr.Object != exe {
		t.Errorf("Symbolize(main_marker) = %+v", fr)
	}
	fr = p.Symbolize(c.MainAddr + 1)
	if fr.Function != "main_marker" || fr.Offset != 1 {
		t.Errorf("Symbolize(main_marker+1) = %+v", fr)
	}

	fr = p.Symbolize(c.TwiceAddr)
	if fr.Function != "int ns::twice<int>(int)" || !strings.HasPrefix(fr.Raw, "_ZN2ns5twice") || fr.Object != fx.Lib {
		t.Errorf("Symbolize(ns::twice<int>) = %+v", fr)
	}
	if got := Shorten(fr.Function, 0); got != "ns::twice<int>" {
		t.Errorf("Shorten(%q) = %q", fr.Function, got)
	}
	fr = p.Symbolize(c.LibAddr + 2)
	if exe == fx.NoPIE {
		// In non-PIE code, the address of a library function is the
		// executable's PLT stub for it, which has no symbol.
		if fr.Raw != "" || fr.Object != exe {
			t.Errorf("Symbolize(&lib_plain+2) = %+v, want an unnamed address in %s", fr, exe)
		}
	} else if fr.Function != "lib_plain" || fr.Offset != 2 || fr.Object != fx.Lib {
		t.Errorf("Symbolize(lib_plain+2) = %+v", fr)
	}

	// Unmapped address: no name, no object.
	fr = p.Symbolize(0x10)
	if fr.Function != "0x10" || fr.Object != "" || fr.Raw != "" {
		t.Errorf("Symbolize(0x10) = %+v", fr)
	}
	// The stack: a known mapping, but no file.
	for _, m := range p.Mappings() {
		if m.Path == "[stack]" {
			fr = p.Symbolize(m.Start + 8)
			if fr.Object != "[stack]" || fr.Raw != "" || !strings.HasPrefix(fr.Function, "0x") {
				t.Errorf("Symbolize(stack) = %+v", fr)
			}
		}
	}

	// Discovery by symbol: lib_plain is exported by the library only.
	locs := p.FindSymbol("lib_plain", false)
	if len(locs) != 1 || locs[0].Object.Path != fx.Lib {
		t.Fatalf("FindSymbol(lib_plain) = %+v", locs)
	}
	if fr := p.Symbolize(locs[0].Addr); fr.Raw != "lib_plain" || fr.Offset != 0 || exe == fx.PIE && locs[0].Addr != c.LibAddr {
		t.Errorf("FindSymbol(lib_plain).Addr = %#x is %+v", locs[0].Addr, fr)
	}
	if want := testutil.FileOffset(t, fx.Lib, locs[0].Symbol.Value); locs[0].FileOffset != want {
		t.Errorf("FindSymbol FileOffset = %#x, want %#x", locs[0].FileOffset, want)
	}
	if f, err := objfile.Open(locs[0].OpenPath); err != nil {
		t.Errorf("Open(%s): %v", locs[0].OpenPath, err)
	} else {
		f.Close()
	}
	// main_marker is not exported: only found when .symtab counts.
	if locs := p.FindSymbol("main_marker", false); len(locs) != 0 {
		t.Errorf("FindSymbol(main_marker, dynamic) = %+v", locs)
	}
	locs = p.FindSymbol("main_marker", true)
	if len(locs) != 1 || locs[0].Addr != c.MainAddr || locs[0].Object.Path != exe {
		t.Errorf("FindSymbol(main_marker, all) = %+v", locs)
	}
}

func TestProcessGone(t *testing.T) {
	if _, err := NewProcess(1<<30, nil); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("NewProcess(missing pid) = %v, want os.ErrNotExist", err)
	}
}

// TestProcessSelf symbolizes a function of the test binary itself: a
// static Go executable, which "go test" links without .symtab (-s), while
// "go test -c" keeps it.
func TestProcessSelf(t *testing.T) {
	p, err := NewProcess(os.Getpid(), nil)
	if err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	f, err := objfile.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fr := p.Symbolize(funcAddr())
	if f.HasSymtab() {
		if fr.Function != "github.com/cudatap/cudatap/symbolize.funcAddr" || fr.Offset != 0 || fr.Object != exe {
			t.Errorf("Symbolize(funcAddr) = %+v", fr)
		}
	} else if fr.Raw != "" || fr.Object != exe || !strings.HasPrefix(fr.Function, "0x") {
		t.Errorf("Symbolize(funcAddr) in stripped binary = %+v", fr)
	}
}
