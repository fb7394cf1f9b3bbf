package objfile

import (
	"debug/elf"
	"testing"

	"github.com/cudatap/cudatap/internal/testutil"
)

// The fixtures (a C++ library, programs linked against it) are
// testutil.ELF's, shared with symbolize's tests.

func TestMain(m *testing.M) { testutil.Main(m) }

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
