package objfile

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/cudatap/cudatap/internal/testutil"
)

const mapsFixture = `55d4c2a00000-55d4c2a02000 r--p 00000000 fd:01 1048602                    /usr/bin/python3.12
55d4c2a02000-55d4c2b30000 r-xp 00002000 fd:01 1048602                    /usr/bin/python3.12
55d4c3e5b000-55d4c3f9c000 rw-p 00000000 00:00 0                          [heap]
7f2a10000000-7f2a10021000 rw-p 00000000 00:00 0 
7f2a1c000000-7f2a1c200000 r-xp 00010000 00:2f 4123                       /usr/local/lib/python3.12/site-packages/torch/lib/libtorch_cuda.so (deleted)
7f2a1c200000-7f2a1c400000 r-xp 00000000 103:02 77                        /opt/my app/lib with spaces.so
7f2a1c400000-7f2a1c401000 rw-s 00000000 00:01 2049                       /memfd:cuda-ipc (deleted)
7f2a1c401000-7f2a1c402000 r-xp 00010000 00:2f 4123                       /usr/local/lib/python3.12/site-packages/torch/lib/libtorch_cuda.so (deleted)
7ffd5a3c1000-7ffd5a3e2000 rw-p 00000000 00:00 0                          [stack]
7ffd5a3f0000-7ffd5a3f4000 r--p 00000000 00:00 0                          [vvar]
7ffd5a3f4000-7ffd5a3f6000 r-xp 00000000 00:00 0                          [vdso]
ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0                  [vsyscall]
`

func TestParseMaps(t *testing.T) {
	maps, err := ParseMaps(strings.NewReader(mapsFixture))
	if err != nil {
		t.Fatal(err)
	}
	want := []Mapping{
		{0x55d4c2a00000, 0x55d4c2a02000, 0, "r--p", "fd:01", 1048602, "/usr/bin/python3.12", false},
		{0x55d4c2a02000, 0x55d4c2b30000, 0x2000, "r-xp", "fd:01", 1048602, "/usr/bin/python3.12", false},
		{0x55d4c3e5b000, 0x55d4c3f9c000, 0, "rw-p", "00:00", 0, "[heap]", false},
		{0x7f2a10000000, 0x7f2a10021000, 0, "rw-p", "00:00", 0, "", false},
		{0x7f2a1c000000, 0x7f2a1c200000, 0x10000, "r-xp", "00:2f", 4123, "/usr/local/lib/python3.12/site-packages/torch/lib/libtorch_cuda.so", true},
		{0x7f2a1c200000, 0x7f2a1c400000, 0, "r-xp", "103:02", 77, "/opt/my app/lib with spaces.so", false},
		{0x7f2a1c400000, 0x7f2a1c401000, 0, "rw-s", "00:01", 2049, "/memfd:cuda-ipc", true},
		{0x7f2a1c401000, 0x7f2a1c402000, 0x10000, "r-xp", "00:2f", 4123, "/usr/local/lib/python3.12/site-packages/torch/lib/libtorch_cuda.so", true},
		{0x7ffd5a3c1000, 0x7ffd5a3e2000, 0, "rw-p", "00:00", 0, "[stack]", false},
		{0x7ffd5a3f0000, 0x7ffd5a3f4000, 0, "r--p", "00:00", 0, "[vvar]", false},
		{0x7ffd5a3f4000, 0x7ffd5a3f6000, 0, "r-xp", "00:00", 0, "[vdso]", false},
		{0xffffffffff600000, 0xffffffffff601000, 0, "--xp", "00:00", 0, "[vsyscall]", false},
	}
	if !reflect.DeepEqual(maps, want) {
		for i := range max(len(maps), len(want)) {
			var g, w Mapping
			if i < len(maps) {
				g = maps[i]
			}
			if i < len(want) {
				w = want[i]
			}
			if g != w {
				t.Errorf("mapping %d:\n got %+v\nwant %+v", i, g, w)
			}
		}
	}

	var file, anon int
	for _, m := range maps {
		if m.IsFile() {
			file++
		} else {
			anon++
		}
	}
	if file != 6 || anon != 6 {
		t.Errorf("IsFile: %d file-backed, %d others; want 6 and 6", file, anon)
	}
	if !maps[1].Exec() || maps[0].Exec() {
		t.Errorf("Exec wrong")
	}
	if got := maps[1].FileOffset(0x55d4c2a02010); got != 0x2010 {
		t.Errorf("FileOffset = %#x", got)
	}

	objs := ObjectFiles(maps)
	var names []string
	for _, o := range objs {
		names = append(names, fmt.Sprintf("%s:%d", o.Path, len(o.Mappings)))
	}
	wantObjs := []string{
		"/usr/bin/python3.12:2",
		"/usr/local/lib/python3.12/site-packages/torch/lib/libtorch_cuda.so:2",
		"/opt/my app/lib with spaces.so:1",
		"/memfd:cuda-ipc:1",
	}
	if !reflect.DeepEqual(names, wantObjs) {
		t.Errorf("ObjectFiles = %q, want %q", names, wantObjs)
	}
	if !objs[1].Deleted {
		t.Errorf("libtorch_cuda.so not marked deleted")
	}
	if m, ok := objs[1].Mapping(0x7f2a1c401800); !ok || m.Start != 0x7f2a1c401000 {
		t.Errorf("ObjectFile.Mapping = %+v, %v", m, ok)
	}
}

func TestParseMapsErrors(t *testing.T) {
	for _, in := range []string{
		"zzzz-1000 r-xp 00000000 fd:01 1 /x\n",
		"1000 r-xp 00000000 fd:01 1 /x\n",
		"2000-1000 r-xp 00000000 fd:01 1 /x\n",
		"1000-2000 r-x 00000000 fd:01 1 /x\n",
		"1000-2000 r-xp 0000g000 fd:01 1 /x\n",
		"1000-2000 r-xp 00000000 fd01 1 /x\n",
		"1000-2000 r-xp 00000000 fd:01 x /x\n",
		"1000-2000\n",
	} {
		if m, err := ParseMaps(strings.NewReader(in)); err == nil {
			t.Errorf("ParseMaps(%q) = %+v, want error", in, m)
		}
	}
	if m, err := ParseMaps(strings.NewReader("\n\n")); err != nil || len(m) != 0 {
		t.Errorf("empty maps: %v, %v", m, err)
	}
}

func TestReadMapsSelf(t *testing.T) {
	maps, err := ReadMaps(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, m := range maps {
		if m.Path == exe && m.Exec() {
			found = true
			// Our own mapping must be openable via OpenPath, privileged
			// (map_files) or not (root).
			f, err := Open(m.OpenPath(os.Getpid()))
			if err != nil {
				t.Errorf("Open(OpenPath) = %v", err)
			} else {
				f.Close()
			}
		}
	}
	if !found {
		t.Errorf("test binary %s not in own maps", exe)
	}

	// pid_max is at most 2^22: this pid cannot exist.
	if _, err := ReadMaps(1 << 30); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("ReadMaps(missing pid) = %v, want os.ErrNotExist", err)
	}
}

func TestOpenPath(t *testing.T) {
	m := Mapping{Start: 0x1000, End: 0x3000, Inode: 5, Dev: "fd:01", Path: "/usr/lib/libx.so"}
	defer mapFilesState.Store(mapFilesState.Load())
	mapFilesState.Store(1)
	if got := m.OpenPath(42); got != "/proc/42/map_files/1000-3000" {
		t.Errorf("OpenPath = %q", got)
	}
	mapFilesState.Store(2)
	if got := m.OpenPath(42); got != "/proc/42/root/usr/lib/libx.so" {
		t.Errorf("OpenPath without map_files = %q", got)
	}
	for _, p := range []string{"[vdso]", ""} {
		if got := (Mapping{Path: p}).OpenPath(42); got != "" {
			t.Errorf("OpenPath(%q) = %q, want \"\"", p, got)
		}
	}
}

// TestOpenPathLive opens a library of a running program through both
// paths OpenPath gives: /proc/PID/map_files where this process may use it,
// and the /proc/PID/root fallback that unprivileged tracers get. Through
// either, the symbol lands at the address the program printed.
func TestOpenPathLive(t *testing.T) {
	fx := testutil.ELF(t)
	c := testutil.StartChild(t, fx.PIE)
	maps, err := ReadMaps(c.Pid())
	if err != nil {
		t.Fatal(err)
	}
	var lib ObjectFile
	for _, o := range ObjectFiles(maps) {
		if o.Path == fx.Lib {
			lib = o
		}
	}
	if lib.Path == "" {
		t.Fatalf("%s not mapped by %s", fx.Lib, fx.PIE)
	}
	defer mapFilesState.Store(mapFilesState.Load())
	for _, state := range []int32{0, 2} {
		mapFilesState.Store(state)
		path := lib.OpenPath(c.Pid())
		if want := fmt.Sprintf("/proc/%d/root%s", c.Pid(), fx.Lib); state == 2 && path != want {
			t.Errorf("OpenPath without map_files = %q, want %q", path, want)
		}
		f, err := NewCache(4).Open(path)
		if err != nil {
			t.Fatalf("Open(%s): %v", path, err)
		}
		bias, ok := lib.Bias(f)
		s, found := f.LookupDynamic("lib_plain")
		if !ok || !found || s.Value+bias != c.LibAddr {
			t.Errorf("through %s: lib_plain at %#x+%#x (%v, %v), want %#x", path, s.Value, bias, ok, found, c.LibAddr)
		}
	}
}

func FuzzParseMaps(f *testing.F) {
	f.Add(mapsFixture)
	for _, line := range strings.Split(mapsFixture, "\n") {
		f.Add(line)
	}
	f.Add("1000-2000 r-xp 00000000 fd:01 1 \n")
	f.Add("1000-2000 r-xp 00000000 fd:01 1 (deleted)")
	f.Add("ffffffffffffffff-ffffffffffffffff ---- ffffffffffffffff :: 18446744073709551615 x")
	f.Fuzz(func(t *testing.T, in string) {
		maps, err := ParseMaps(strings.NewReader(in))
		if err != nil {
			return
		}
		for _, m := range maps {
			if m.End < m.Start || len(m.Perms) != 4 || !strings.Contains(m.Dev, ":") {
				t.Errorf("invalid mapping accepted: %+v", m)
			}
		}
		ObjectFiles(maps)
	})
}
