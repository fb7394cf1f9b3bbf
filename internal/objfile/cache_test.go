package objfile

import (
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/cudatap/cudatap/internal/testutil"
)

func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, data, 0o755); err != nil {
		t.Fatal(err)
	}
}

func TestCache(t *testing.T) {
	fx := testutil.ELF(t)
	c := NewCache(8)
	a, err := c.Open(fx.Lib)
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Open(fx.Lib)
	if err != nil || b != a {
		t.Fatalf("second Open = %p, %v; want the cached %p", b, err, a)
	}

	// A copy (other inode, same build-id) shares the entry.
	cp := filepath.Join(t.TempDir(), "copy.so")
	copyFile(t, fx.Lib, cp)
	if b, err := c.Open(cp); err != nil || b != a {
		t.Errorf("Open(copy) = %p, %v; want the cached %p", b, err, a)
	}
	// So does the stripped copy: the unstripped one has more symbols.
	if b, err := c.Open(fx.Stripped); err != nil || b != a {
		t.Errorf("Open(stripped) = %p, %v; want the cached unstripped %p", b, err, a)
	}
	if c.Len() != 1 {
		t.Errorf("Len = %d, want 1", c.Len())
	}

	// The other way round: an unstripped file replaces a stripped one.
	c2 := NewCache(8)
	s, _ := c2.Open(fx.Stripped)
	if s == nil || s.HasSymtab() {
		t.Fatalf("Open(stripped) = %v", s)
	}
	if u, err := c2.Open(fx.Lib); err != nil || !u.HasSymtab() {
		t.Errorf("Open(lib) after stripped = %v, %v; want the unstripped file", u, err)
	}
	if s2, _ := c2.Open(fx.Stripped); s2 == nil || !s2.HasSymtab() {
		t.Errorf("Open(stripped) again = %v, want the unstripped file", s2)
	}
}

func TestCacheEviction(t *testing.T) {
	fx := testutil.ELF(t)
	c := NewCache(1)
	lib, err := c.Open(fx.Lib)
	if err != nil {
		t.Fatal(err)
	}
	exe, err := c.Open(fx.PIE)
	if err != nil {
		t.Fatal(err)
	}
	if c.Len() != 1 {
		t.Errorf("Len = %d, want 1", c.Len())
	}
	// The evicted file was closed before being indexed: it still works.
	if _, ok := lib.Lookup("lib_plain"); !ok {
		t.Errorf("Lookup on evicted file failed: %v", lib.Index())
	}
	if _, ok := exe.Lookup("main_marker"); !ok {
		t.Errorf("Lookup failed: %v", exe.Index())
	}
	if again, _ := c.Open(fx.Lib); again == lib {
		t.Errorf("evicted file still cached")
	}
}

func TestCacheConcurrent(t *testing.T) {
	fx := testutil.ELF(t)
	c := NewCache(2)
	paths := []string{fx.Lib, fx.Stripped, fx.PIE, fx.NoPIE}
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 50 {
				f, err := c.Open(paths[(i+j)%len(paths)])
				if err != nil {
					t.Error(err)
					return
				}
				f.Symbolize(0x1000)
				f.LookupDynamic("lib_plain")
				f.Lookup("main_marker")
			}
		}()
	}
	wg.Wait()
	if c.Len() > 2 {
		t.Errorf("Len = %d > max 2", c.Len())
	}
}
