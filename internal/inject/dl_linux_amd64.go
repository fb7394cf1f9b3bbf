package inject

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/cudatap/cudatap/internal/objfile"
)

// Symbol returns the address in process pid of the dynamic symbol name
// ("name@VERSION" picks a version) of the first library mapped in pid
// whose file base name begins with lib, e.g. "libc.so.6".
func Symbol(pid int, lib, name string) (uint64, error) {
	objs, tid, err := objects(pid)
	if err != nil {
		return 0, err
	}
	l, err := openLibrary(tid, objs, lib)
	if err != nil {
		return 0, fmt.Errorf("process %d: %w", pid, err)
	}
	defer l.f.Close()
	addr, ok := l.addr(name)
	if !ok {
		return 0, fmt.Errorf("process %d: %s has no dynamic symbol %q", pid, l.path, name)
	}
	return addr, nil
}

// objects lists the files mapped in process pid, and returns the thread
// through whose /proc entries they are open (see liveThread).
func objects(pid int) ([]objfile.ObjectFile, int, error) {
	tid, err := liveThread(pid)
	if err != nil {
		return nil, 0, err
	}
	maps, err := objfile.ReadMaps(tid)
	if errors.Is(err, os.ErrNotExist) {
		return nil, 0, fmt.Errorf("process %d: %w", pid, ErrNoProcess)
	}
	if err != nil {
		return nil, 0, err
	}
	return objfile.ObjectFiles(maps), tid, nil
}

// library is an ELF object mapped in the target, open from here.
type library struct {
	path string // as the target sees it
	f    *objfile.File
	bias uint64 // runtime address = ELF address + bias
}

var errNotMapped = errors.New("no such library mapped")

// openLibrary opens the first of objs whose base name begins with lib,
// through the /proc entries of thread tid.
func openLibrary(tid int, objs []objfile.ObjectFile, lib string) (*library, error) {
	for _, o := range objs {
		if !strings.HasPrefix(filepath.Base(o.Path), lib) {
			continue
		}
		// OpenPath reads the file through /proc/PID/map_files or
		// /proc/PID/root: the path is the target's, in its own mount
		// namespace (a container's).
		f, err := objfile.Open(o.OpenPath(tid))
		if err != nil {
			return nil, fmt.Errorf("open %s: %w", o.Path, err)
		}
		bias, ok := o.Bias(f)
		if !ok {
			f.Close()
			return nil, fmt.Errorf("%s: no mapping matches a loadable segment", o.Path)
		}
		return &library{path: o.Path, f: f, bias: bias}, nil
	}
	return nil, fmt.Errorf("%s: %w", lib, errNotMapped)
}

func (l *library) addr(name string) (uint64, bool) {
	s, ok := l.f.LookupDynamic(name)
	return s.Value + l.bias, ok
}

// dl is where the target's loader entry points are.
type dl struct {
	open, close uint64
	errmsg      uint64 // dlerror; 0 when the entry points report no reason
	mode        uint64 // dlopen's mode argument
}

// dlEntry names a set of loader entry points to look for.
type dlEntry struct {
	lib, open, close, errmsg string
	mode                     uint64
}

const (
	rtldNow = 2 // RTLD_NOW: resolve every symbol before dlopen returns
	// rtldDlopen is glibc's internal __RTLD_DLOPEN, which dlopen adds to
	// the mode it passes on: it marks the object as dlopen()ed.
	rtldDlopen = 0x80000000
)

// dlEntries are the places glibc has kept dlopen, in order of preference.
// Since 2.34, libc.so.6 exports dlopen itself (dlopen@@GLIBC_2.34). Before,
// dlopen lived in libdl.so.2, mapped only in programs linked with it, and
// libc had only __libc_dlopen_mode (GLIBC_PRIVATE), the entry point libdl
// wrapped. That one takes the same arguments but reports errors only by
// returning NULL: dlerror does not see them.
var dlEntries = []dlEntry{
	{lib: "libc.so.6", open: "dlopen", close: "dlclose", errmsg: "dlerror", mode: rtldNow},
	{lib: "libdl.so.2", open: "dlopen", close: "dlclose", errmsg: "dlerror", mode: rtldNow},
	{lib: "libc.so.6", open: "__libc_dlopen_mode", close: "__libc_dlclose", mode: rtldNow | rtldDlopen},
}

// findDl finds the first of entries that process pid has.
func findDl(pid int, entries []dlEntry) (dl, error) {
	objs, tid, err := objects(pid)
	if err != nil {
		return dl{}, err
	}
	libs := map[string]*library{} // nil: not mapped
	defer func() {
		for _, l := range libs {
			if l != nil {
				l.f.Close()
			}
		}
	}()
	for _, e := range entries {
		l, seen := libs[e.lib]
		if !seen {
			l, err = openLibrary(tid, objs, e.lib)
			if errors.Is(err, errNotMapped) {
				libs[e.lib] = nil
				continue
			}
			if err != nil {
				return dl{}, fmt.Errorf("process %d: %w", pid, err)
			}
			libs[e.lib] = l
		}
		if l == nil {
			continue
		}
		d := dl{mode: e.mode}
		var ok1, ok2, ok3 bool
		d.open, ok1 = l.addr(e.open)
		d.close, ok2 = l.addr(e.close)
		if ok3 = e.errmsg == ""; !ok3 {
			d.errmsg, ok3 = l.addr(e.errmsg)
		}
		if ok1 && ok2 && ok3 {
			return d, nil
		}
	}
	return dl{}, fmt.Errorf("process %d: %w (glibc's libc.so.6 or libdl.so.2 is not mapped, or exports no dlopen)", pid, ErrNoDlopen)
}
