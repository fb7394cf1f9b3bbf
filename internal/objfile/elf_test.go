package objfile

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/cudatap/cudatap/internal/testutil"
)

func openT(tb testing.TB, path string) *File {
	tb.Helper()
	f, err := Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { f.Close() })
	return f
}

func mustLookup(t *testing.T, f *File, name string) Symbol {
	t.Helper()
	s, ok := f.Lookup(name)
	if !ok {
		t.Fatalf("Lookup(%q) not found in %s", name, f.Path())
	}
	return s
}

func TestSharedLibLookup(t *testing.T) {
	fx := testutil.ELF(t)
	f := openT(t, fx.Lib)
	if f.Type() != elf.ET_DYN {
		t.Errorf("Type = %v, want ET_DYN", f.Type())
	}
	if len(f.BuildID()) != 40 {
		t.Errorf("BuildID = %q, want 40 hex digits (sha1)", f.BuildID())
	}
	if !f.HasSymtab() {
		t.Errorf("HasSymtab = false for an unstripped library")
	}
	dyn := elfSymbols(t, fx.Lib, true)
	all := elfSymbols(t, fx.Lib, false)

	s := mustLookup(t, f, "lib_plain")
	if want := dyn["lib_plain"]; s.Value != want.Value || s.Size != want.Size {
		t.Errorf("lib_plain = %#x+%d, debug/elf says %#x+%d", s.Value, s.Size, want.Value, want.Size)
	}
	if !s.Dynamic || !s.Global || !s.Func || s.Version != "LIBT_1.0" {
		t.Errorf("lib_plain = %+v, want dynamic global function of version LIBT_1.0", s)
	}

	// Versioned symbol: the default version, then an explicit old one.
	foo := mustLookup(t, f, "foo")
	if foo.Version != "LIBT_2.0" || foo.Value != all["foo_new"].Value {
		t.Errorf("foo = %+v, want foo_new's address %#x, version LIBT_2.0", foo, all["foo_new"].Value)
	}
	for _, q := range []string{"foo@LIBT_1.0", "foo@@LIBT_1.0"} {
		old := mustLookup(t, f, q)
		if old.Version != "LIBT_1.0" || old.Value != all["foo_old"].Value {
			t.Errorf("%s = %+v, want foo_old's address %#x", q, old, all["foo_old"].Value)
		}
	}
	if s, ok := f.Lookup("foo@LIBT_9"); ok {
		t.Errorf("Lookup(foo@LIBT_9) = %+v, want not found", s)
	}

	// The C++ template instantiation, by mangled name (Itanium ABI).
	const mangled = "_ZN2ns5twiceIiEET_S1_" // int ns::twice<int>(int)
	if _, ok := dyn[mangled]; !ok {
		t.Fatalf("no %s in .dynsym", mangled)
	}
	if s := mustLookup(t, f, mangled); s.Value != dyn[mangled].Value || !s.Dynamic {
		t.Errorf("%s = %+v, want %#x", mangled, s, dyn[mangled].Value)
	}

	// A local function is only in .symtab.
	lh := mustLookup(t, f, "local_helper")
	if lh.Dynamic || lh.Global || lh.Value != all["local_helper"].Value {
		t.Errorf("local_helper = %+v, want local .symtab symbol at %#x", lh, all["local_helper"].Value)
	}
	if s, ok := f.LookupDynamic("local_helper"); ok {
		t.Errorf("LookupDynamic(local_helper) = %+v, want not found", s)
	}
	if s, ok := f.LookupDynamic("lib_plain"); !ok || s.Value != dyn["lib_plain"].Value {
		t.Errorf("LookupDynamic(lib_plain) = %+v, %v", s, ok)
	}

	// Data objects are found too, and are not functions.
	if d := mustLookup(t, f, "lib_data"); d.Func || d.Size != 64 {
		t.Errorf("lib_data = %+v, want a 64-byte object", d)
	}
	// Undefined (imported) symbols are not definitions.
	for _, name := range []string{"__cxa_finalize", "nonexistent", ""} {
		if s, ok := f.Lookup(name); ok {
			t.Errorf("Lookup(%q) = %+v, want not found", name, s)
		}
	}

	// Cross-check with nm, if installed.
	if _, err := exec.LookPath("nm"); err == nil {
		out, err := exec.Command("nm", "-D", "--defined-only", fx.Lib).Output()
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(out), "\n") {
			fields := strings.Fields(line)
			if len(fields) == 3 && fields[2] == "lib_plain" {
				v, _ := strconv.ParseUint(fields[0], 16, 64)
				if v != s.Value {
					t.Errorf("nm says lib_plain is at %#x, Lookup %#x", v, s.Value)
				}
			}
		}
	}
}

// TestFileOffsetRoundTrip checks FileOffset and VAddr against the program
// headers for every defined function of every fixture, and that Symbolize
// names every function from its first to its last byte.
func TestFileOffsetRoundTrip(t *testing.T) {
	fx := testutil.ELF(t)
	for _, path := range []string{fx.Lib, fx.Stripped, fx.PIE, fx.NoPIE} {
		t.Run(filepath.Base(path), func(t *testing.T) {
			f := openT(t, path)
			syms := elfSymbols(t, path, true)
			if f.HasSymtab() {
				for k, v := range elfSymbols(t, path, false) {
					syms[k] = v
				}
			}
			n := 0
			for name, s := range syms {
				if elf.ST_TYPE(s.Info) != elf.STT_FUNC || s.Value == 0 {
					continue
				}
				n++
				off, ok := f.FileOffset(s.Value)
				if want := testutil.FileOffset(t, path, s.Value); !ok || off != want {
					t.Errorf("FileOffset(%s=%#x) = %#x, %v; want %#x", name, s.Value, off, ok, want)
				}
				if v, ok := f.VAddr(off); !ok || v != s.Value {
					t.Errorf("VAddr(%#x) = %#x, %v; want %#x", off, v, ok, s.Value)
				}
				for _, delta := range []uint64{0, s.Size / 2, max(s.Size, 1) - 1} {
					got, goff, ok := f.Symbolize(s.Value + delta)
					if !ok || got.Value != s.Value || goff != delta {
						t.Errorf("Symbolize(%s+%d) = %+v+%d, %v", name, delta, got, goff, ok)
					}
				}
			}
			if n < 3 {
				t.Errorf("only %d functions checked", n)
			}
		})
	}
}

func TestStripped(t *testing.T) {
	fx := testutil.ELF(t)
	full, stripped := openT(t, fx.Lib), openT(t, fx.Stripped)
	if stripped.HasSymtab() {
		t.Errorf("stripped copy has .symtab")
	}
	if full.BuildID() == "" || stripped.BuildID() != full.BuildID() {
		t.Errorf("build-ids %q and %q, want equal and non-empty", full.BuildID(), stripped.BuildID())
	}
	want := mustLookup(t, full, "lib_plain")
	if got := mustLookup(t, stripped, "lib_plain"); got != want {
		t.Errorf("stripped lib_plain = %+v, want %+v", got, want)
	}
	lh := mustLookup(t, full, "local_helper")
	if s, ok := stripped.Lookup("local_helper"); ok {
		t.Errorf("stripped Lookup(local_helper) = %+v, want not found", s)
	}
	// The local function has no symbol left: it must not be attributed to
	// whatever exported function precedes it.
	if s, off, ok := stripped.Symbolize(lh.Value); ok {
		t.Errorf("stripped Symbolize(local_helper) = %+v+%d, want not found", s, off)
	}
	if s, _, ok := full.Symbolize(lh.Value); !ok || s.Name != "local_helper" {
		t.Errorf("Symbolize(local_helper) = %+v, %v", s, ok)
	}
}

func TestExecutables(t *testing.T) {
	fx := testutil.ELF(t)
	for _, tc := range []struct {
		path string
		typ  elf.Type
	}{{fx.PIE, elf.ET_DYN}, {fx.NoPIE, elf.ET_EXEC}} {
		f := openT(t, tc.path)
		if f.Type() != tc.typ {
			t.Errorf("%s: Type = %v, want %v", tc.path, f.Type(), tc.typ)
		}
		s := mustLookup(t, f, "main_marker")
		if want := elfSymbols(t, tc.path, false)["main_marker"]; s.Value != want.Value || s.Dynamic || !s.Global {
			t.Errorf("%s: main_marker = %+v, want static global at %#x", tc.path, s, want.Value)
		}
		if tc.typ == elf.ET_EXEC && s.Value < 0x400000 {
			t.Errorf("non-PIE main_marker at %#x, expected an absolute address", s.Value)
		}
		if off, err := f.SymbolFileOffset("main_marker"); err != nil || off != testutil.FileOffset(t, tc.path, s.Value) {
			t.Errorf("SymbolFileOffset = %#x, %v", off, err)
		}
		if _, err := f.SymbolFileOffset("nope"); err == nil {
			t.Errorf("SymbolFileOffset(nope) succeeded")
		}
	}
}

// TestReopenAfterClose checks that a File closed before its index was built
// reopens the file, and refuses a file that changed.
func TestReopenAfterClose(t *testing.T) {
	fx := testutil.ELF(t)
	path := filepath.Join(t.TempDir(), "lib.so")
	data, err := os.ReadFile(fx.Lib)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	f := openT(t, path)
	f.Close()
	if _, ok := f.Lookup("lib_plain"); !ok {
		t.Errorf("Lookup after Close failed: %v", f.Index())
	}

	g := openT(t, path)
	g.Close()
	if err := os.WriteFile(path, append(data, 0), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, ok := g.Lookup("lib_plain"); ok {
		t.Errorf("Lookup succeeded on a file that changed after Open")
	}
	if err := g.Index(); err == nil || !strings.Contains(err.Error(), errFileChanged.Error()) {
		t.Errorf("Index() = %v, want %v", err, errFileChanged)
	}
}

// TestNamesReadFromFile checks that names, read from the file when an
// address is named, survive Close, and that a file changed under an index
// (overwritten in place, truncated) leaves addresses unknown, never named
// wrongly.
func TestNamesReadFromFile(t *testing.T) {
	fx := testutil.ELF(t)
	path := filepath.Join(t.TempDir(), "lib.so")
	copyFile(t, fx.Lib, path)
	f := openT(t, path)
	plain := mustLookup(t, f, "lib_plain")
	foo := mustLookup(t, f, "foo")
	f.Close()
	for _, want := range []Symbol{plain, foo} {
		if s, off, ok := f.Symbolize(want.Value + 1); !ok || s.Name != want.Name || off != 1 {
			t.Errorf("Symbolize(%s+1) after Close = %q+%d, %v", want.Name, s.Name, off, ok)
		}
	}

	// Overwrite lib_plain's name in place: same file, same descriptor.
	ix := f.full.Load()
	i, _ := ix.symbolize(plain.Value)
	w, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, err := w.WriteAt([]byte("X"), ix.nameAt(&ix.ents[i])); err != nil {
		t.Fatal(err)
	}
	if s, _, ok := f.Symbolize(plain.Value); ok {
		t.Errorf("Symbolize(lib_plain) after its name was overwritten = %q, want unknown", s.Name)
	}
	if s, _, ok := f.Symbolize(foo.Value); !ok || s.Name != "foo" {
		t.Errorf("Symbolize(foo) = %q, %v; want foo (its name is intact)", s.Name, ok)
	}

	// Truncated: the names are gone.
	if err := w.Truncate(0); err != nil {
		t.Fatal(err)
	}
	if s, _, ok := f.Symbolize(foo.Value); ok {
		t.Errorf("Symbolize(foo) in a truncated file = %q, want unknown", s.Name)
	}
	if _, ok := f.Lookup("foo"); !ok {
		t.Errorf("Lookup(foo) failed: lookups by name need only the index")
	}
}

// TestStrWindow reads names through a window much smaller than the table:
// in offset order (the index), out of order (version names), shared
// suffixes, names too long, the unterminated end, and a file cut short.
func TestStrWindow(t *testing.T) {
	table := "\x00ab\x00abcdefgh\x00cd\x00xyz"
	const maxLen = 4
	cases := []struct {
		off  uint64
		want string // "-" for none
	}{
		{0, ""}, {1, "ab"}, {2, "b"}, {2, "b"}, {4, "-"}, {6, "-"}, {9, "fgh"}, {10, "gh"},
		{12, ""}, {13, "cd"}, {16, "xyz"}, {18, "z"}, {19, "-"},
		{1, "ab"}, {14, "d"}, {5, "-"}, {11, "h"},
	}
	w := newStrWindow(strings.NewReader(table), 0, uint64(len(table)), maxLen)
	for _, c := range cases {
		got, err := w.name(c.off)
		if err != nil {
			t.Fatalf("name(%d): %v", c.off, err)
		}
		if s := string(got); (got == nil) != (c.want == "-") || (got != nil && s != c.want) {
			t.Errorf("name(%d) = %q (nil %v), want %q", c.off, s, got == nil, c.want)
		}
	}

	// The table says it is longer than the file now is.
	w = newStrWindow(strings.NewReader(table[:8]), 0, uint64(len(table)), maxLen)
	if got, err := w.name(1); err == nil {
		t.Errorf("name(1) of a file cut short = %q, want an error", got)
	}
}

func TestOpenNotELF(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x")
	os.WriteFile(path, []byte("#!/bin/sh\necho hi\n"), 0o755)
	if _, err := Open(path); err == nil {
		t.Errorf("Open of a shell script succeeded")
	}
	if _, err := Open(filepath.Join(t.TempDir(), "missing")); !os.IsNotExist(err) {
		t.Errorf("Open of a missing file: %v", err)
	}
}

// TestProcRootOpen checks the openat2 path: /proc/self/root/<path>.
func TestProcRootOpen(t *testing.T) {
	fx := testutil.ELF(t)
	f := openT(t, "/proc/self/root"+fx.Lib)
	if _, ok := f.Lookup("lib_plain"); !ok {
		t.Errorf("Lookup through /proc/self/root failed: %v", f.Index())
	}
	for _, tc := range []struct{ in, root, rel string }{
		{"/proc/12/root/usr/lib/x.so", "/proc/12/root", "usr/lib/x.so"},
		{"/proc/self/root/a", "/proc/self/root", "a"},
	} {
		root, rel, ok := splitProcRoot(tc.in)
		if !ok || root != tc.root || rel != tc.rel {
			t.Errorf("splitProcRoot(%q) = %q, %q, %v", tc.in, root, rel, ok)
		}
	}
	for _, in := range []string{"/usr/lib/x.so", "/proc/12/map_files/1-2", "/proc/x1/root/a", "/proc/12/root/", "/proc//root/a"} {
		if _, _, ok := splitProcRoot(in); ok {
			t.Errorf("splitProcRoot(%q) matched", in)
		}
	}
}

func TestParseBuildIDNote(t *testing.T) {
	note := []byte{
		4, 0, 0, 0, // namesz
		3, 0, 0, 0, // descsz
		3, 0, 0, 0, // NT_GNU_BUILD_ID
		'G', 'N', 'U', 0,
		0xab, 0xcd, 0xef, 0, // desc, padded
	}
	if got := parseBuildIDNote(note, binary.LittleEndian); got != "abcdef" {
		t.Errorf("parseBuildIDNote = %q", got)
	}
	for i := range note {
		parseBuildIDNote(note[:i], binary.LittleEndian) // must not panic
	}
	if got := parseBuildIDNote(bytes.Repeat([]byte{0xff}, 32), binary.LittleEndian); got != "" {
		t.Errorf("garbage note = %q", got)
	}
}

// FuzzOpen feeds corrupted ELF files to Open and the symbol index: a
// tracer reads whatever files the traced processes map, and must not crash
// or allocate without bound on a malformed one.
func FuzzOpen(f *testing.F) {
	if _, err := exec.LookPath("g++"); err == nil {
		fx := testutil.ELF(f)
		for _, p := range []string{fx.Lib, fx.Stripped} {
			data, err := os.ReadFile(p)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(data)
			f.Add(data[:len(data)/2])
		}
	}
	f.Add([]byte("\x7fELF\x02\x01\x01\x00"))
	f.Add([]byte("\x7fELF\x01\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x03\x00\x03\x00"))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(dir, "fuzz.elf")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		ef, err := Open(path)
		if err != nil {
			return
		}
		defer ef.Close()
		ef.BuildID()
		ef.LookupDynamic("lib_plain")
		ef.Index()
		for _, name := range []string{"lib_plain", "foo", "foo@LIBT_1.0", "local_helper", ""} {
			if s, ok := ef.Lookup(name); ok {
				ef.FileOffset(s.Value)
				ef.Symbolize(s.Value)
			}
		}
		for _, a := range []uint64{0, 0x1000, 0x1100, 1 << 63} {
			ef.Symbolize(a)
			if off, ok := ef.FileOffset(a); ok {
				ef.VAddr(off)
			}
		}
	})
}
