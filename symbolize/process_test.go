package symbolize

import (
	"errors"
	"os"
	"strings"
	"testing"
)

func TestProcessSymbolize(t *testing.T) {
	fx := getFixtures(t)
	for _, exe := range []string{fx.pie, fx.nopie} {
		for _, mapFiles := range []bool{true, false} {
			name := exe[strings.LastIndexByte(exe, '/')+1:]
			if !mapFiles {
				name += "/no-map_files"
			}
			t.Run(name, func(t *testing.T) {
				if !mapFiles {
					// Exercise the /proc/PID/root fallback that
					// unprivileged tracers get.
					old := mapFilesState.Load()
					mapFilesState.Store(2)
					t.Cleanup(func() { mapFilesState.Store(old) })
				}
				testProcessSymbolize(t, fx, exe)
			})
		}
	}
}

func testProcessSymbolize(t *testing.T, fx *fixtures, exe string) {
	c := startChild(t, exe)
	p, err := NewProcess(c.cmd.Process.Pid, NewCache(16))
	if err != nil {
		t.Fatal(err)
	}

	fr := p.Symbolize(c.mainAddr)
	if fr.Function != "main_marker" || fr.Raw != "main_marker" || fr.Offset != 0 || fr.Object != exe {
		t.Errorf("Symbolize(main_marker) = %+v", fr)
	}
	fr = p.Symbolize(c.mainAddr + 1)
	if fr.Function != "main_marker" || fr.Offset != 1 {
		t.Errorf("Symbolize(main_marker+1) = %+v", fr)
	}

	fr = p.Symbolize(c.twiceAddr)
	if fr.Function != "int ns::twice<int>(int)" || !strings.HasPrefix(fr.Raw, "_ZN2ns5twice") || fr.Object != fx.lib {
		t.Errorf("Symbolize(ns::twice<int>) = %+v", fr)
	}
	if got := Shorten(fr.Function, 0); got != "ns::twice<int>" {
		t.Errorf("Shorten(%q) = %q", fr.Function, got)
	}
	fr = p.Symbolize(c.libAddr + 2)
	if exe == fx.nopie {
		// In non-PIE code, the address of a library function is the
		// executable's PLT stub for it, which has no symbol.
		if fr.Raw != "" || fr.Object != exe {
			t.Errorf("Symbolize(&lib_plain+2) = %+v, want an unnamed address in %s", fr, exe)
		}
	} else if fr.Function != "lib_plain" || fr.Offset != 2 || fr.Object != fx.lib {
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
	if len(locs) != 1 || locs[0].Object.Path != fx.lib {
		t.Fatalf("FindSymbol(lib_plain) = %+v", locs)
	}
	if fr := p.Symbolize(locs[0].Addr); fr.Raw != "lib_plain" || fr.Offset != 0 || exe == fx.pie && locs[0].Addr != c.libAddr {
		t.Errorf("FindSymbol(lib_plain).Addr = %#x is %+v", locs[0].Addr, fr)
	}
	if want := expectedFileOffset(t, fx.lib, locs[0].Symbol.Value); locs[0].FileOffset != want {
		t.Errorf("FindSymbol FileOffset = %#x, want %#x", locs[0].FileOffset, want)
	}
	if f, err := Open(locs[0].OpenPath); err != nil {
		t.Errorf("Open(%s): %v", locs[0].OpenPath, err)
	} else {
		f.Close()
	}
	// main_marker is not exported: only found when .symtab counts.
	if locs := p.FindSymbol("main_marker", false); len(locs) != 0 {
		t.Errorf("FindSymbol(main_marker, dynamic) = %+v", locs)
	}
	locs = p.FindSymbol("main_marker", true)
	if len(locs) != 1 || locs[0].Addr != c.mainAddr || locs[0].Object.Path != exe {
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
	f := openT(t, exe)
	fr := p.Symbolize(funcAddr())
	if f.HasSymtab() {
		if fr.Function != "github.com/cudatap/cudatap/symbolize.funcAddr" || fr.Offset != 0 || fr.Object != exe {
			t.Errorf("Symbolize(funcAddr) = %+v", fr)
		}
	} else if fr.Raw != "" || fr.Object != exe || !strings.HasPrefix(fr.Function, "0x") {
		t.Errorf("Symbolize(funcAddr) in stripped binary = %+v", fr)
	}
}
