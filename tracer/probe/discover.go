package probe

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/cudatap/cudatap/internal/objfile"
	"github.com/cudatap/cudatap/internal/procfs"
	"github.com/cudatap/cudatap/tracer/event"
	"golang.org/x/sys/unix"
)

// ErrNoCUDA means a process maps no library that exports a hooked CUDA API.
var ErrNoCUDA = errors.New("no CUDA runtime, driver or NCCL library found")

// ErrNoProcess means the target process does not exist (any more).
var ErrNoProcess = errors.New("no such process")

// Library is one mapped file of a process that exports a hooked layer.
type Library struct {
	Layer    event.Layer
	Path     string // as the target sees it
	OpenPath string // how this process opens it (/proc/PID/map_files/... or /proc/PID/root/...)
	Dev      string
	Inode    uint64
	Static   bool // symbols found only in .symtab (runtime linked into the executable)
	file     *objfile.File
}

// Key identifies the library file across processes (same inode = same probes).
func (l *Library) Key() string { return fmt.Sprintf("%s:%d", l.Dev, l.Inode) }

// Discovery is what a scan of a process found.
type Discovery struct {
	PID       int
	Libraries []Library
	Searched  int      // file-backed executable mappings examined
	Names     []string // their paths, for error messages
	Plain     []string // Keys of the examined files that hold no hooked layer
	LdSo      *Library // the dynamic linker, for the library-load hook
}

// Discover finds every mapping of pid that exports a hooked API: by symbol,
// not by file name, so that pip wheels, vendored copies with hashed names,
// deleted files and executables with a statically linked runtime are found.
// Files are opened through /proc/PID so paths in other mount namespaces work.
//
// skip, if not nil, names files ("dev:inode") already known to hold no
// hooked layer; they are not opened again (watch mode looks at every
// process on the host).
func Discover(pid int, cache *objfile.Cache, skip func(key string) bool) (*Discovery, error) {
	data, err := procfs.Maps(pid)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("process %d: %w", pid, ErrNoProcess)
		}
		return nil, fmt.Errorf("read memory map of process %d: %w", pid, err)
	}
	return DiscoverMaps(pid, data, cache, skip)
}

// DiscoverMaps is Discover on the text of /proc/PID/maps read already
// (the host scan reads it once to see whether it changed).
func DiscoverMaps(pid int, data []byte, cache *objfile.Cache, skip func(key string) bool) (*Discovery, error) {
	maps, err := objfile.ParseMaps(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("read memory map of process %d: %w", pid, err)
	}
	exe, _ := procfs.Exe(pid)
	d := &Discovery{PID: pid}
	for _, obj := range objfile.ObjectFiles(maps) {
		if !hasExec(obj) {
			continue
		}
		d.Searched++
		d.Names = append(d.Names, obj.Path)
		key := fmt.Sprintf("%s:%d", obj.Dev, obj.Inode)
		if skip != nil && skip(key) {
			continue
		}
		path := obj.OpenPath(pid)
		f, err := cache.Open(path)
		if err != nil {
			// Not ELF, or unreadable: not a CUDA library we can hook. A
			// file that vanished with its process says nothing about the
			// file itself: other processes mapping it must still be looked at.
			if !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ESRCH) {
				d.Plain = append(d.Plain, key)
			}
			continue
		}
		found := len(d.Libraries)
		base := filepath.Base(obj.Path)
		if strings.HasPrefix(base, "ld-linux") || strings.HasPrefix(base, "ld64.so") {
			if _, ok := f.LookupDynamic("_dl_debug_state"); ok {
				d.LdSo = &Library{Path: obj.Path, OpenPath: path, Dev: obj.Dev, Inode: obj.Inode, file: f}
			}
		}
		// The executable (and anything named like the runtime) may carry a
		// statically linked runtime visible only in .symtab; NVTX only in
		// the files localNVTX names.
		deep := obj.Path == exe || strings.Contains(base, "cudart")
		for _, layer := range event.Layers {
			sym := layer.ProbeSymbol()
			static := false
			if _, ok := f.LookupDynamic(sym); !ok {
				if layer == event.NVTX && !localNVTX(base) || layer != event.NVTX && !deep {
					continue
				}
				if _, ok := f.Lookup(sym); !ok {
					continue
				}
				static = true
			}
			d.Libraries = append(d.Libraries, Library{Layer: layer, Path: obj.Path, OpenPath: path,
				Dev: obj.Dev, Inode: obj.Inode, Static: static, file: f})
		}
		if len(d.Libraries) == found && !strings.HasPrefix(base, "ld-linux") && !strings.HasPrefix(base, "ld64.so") {
			d.Plain = append(d.Plain, key)
			f.Close() // keep its index, not its descriptor: watch mode sees every file on the host
		}
	}
	return d, nil
}

// localNVTX reports whether a file named base keeps NVTX calls a program
// makes in .symtab only. NVTX v3 is header-only: its functions are static
// inline in each translation unit, exported by nothing, and where one is
// not inlined (its address taken) a local copy remains. PyTorch's Python
// bindings (libtorch_python.so, nvtx.cpp: torch.cuda.nvtx's range_push,
// range_pop, range_start, range_end and mark) keep one copy each of
// nvtxRangePushA, nvtxRangePop, nvtxRangeStartA, nvtxRangeEnd and nvtxMarkA
// (PyTorch 2.11, readelf -s). Other files are not searched: where several
// translation units keep copies, hooking one would pair a push with
// another unit's pop.
func localNVTX(base string) bool { return strings.HasPrefix(base, "libtorch_python") }

// HasCUDA reports whether d found a CUDA layer (runtime, driver, NCCL):
// NVTX alone makes no CUDA process.
func (d *Discovery) HasCUDA() bool {
	for _, l := range d.Libraries {
		if l.Layer != event.NVTX {
			return true
		}
	}
	return false
}

func hasExec(o objfile.ObjectFile) bool {
	for _, m := range o.Mappings {
		if m.Exec() {
			return true
		}
	}
	return false
}

// NoCUDAError explains which mappings were searched.
func (d *Discovery) NoCUDAError() error {
	names := d.Names
	more := ""
	if len(names) > 12 {
		more = fmt.Sprintf(", and %d more", len(names)-12)
		names = names[:12]
	}
	return fmt.Errorf("process %d: %w: searched %d executable mappings for cudaLaunchKernel, cuLaunchKernel and ncclAllReduce (%s%s); "+
		"if the program loads CUDA later (PyTorch does on first use), start cudatap first or wait until CUDA is initialized",
		d.PID, ErrNoCUDA, d.Searched, strings.Join(names, ", "), more)
}

// OpenDriver opens a file that a process may load later as its CUDA driver:
// openPath is how cudatap opens it (under /proc/PID/root), path how the
// process names it. It fails unless the file exports the driver's launch.
func OpenDriver(openPath, path string, cache *objfile.Cache) (*Library, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(openPath, &st); err != nil {
		return nil, err
	}
	f, err := cache.Open(openPath)
	if err != nil {
		return nil, err
	}
	if _, ok := f.LookupDynamic(event.Driver.ProbeSymbol()); !ok {
		f.Close()
		return nil, fmt.Errorf("%s exports no %s: not a CUDA driver", path, event.Driver.ProbeSymbol())
	}
	return &Library{Layer: event.Driver, Path: path, OpenPath: openPath,
		Dev: fmt.Sprintf("%02x:%02x", unix.Major(st.Dev), unix.Minor(st.Dev)), Inode: st.Ino, file: f}, nil
}

// FileID identifies the file behind a library as the kernel does (device
// and inode of the opened file), whatever path or mapping it was found
// through: two probe sets on one file would count every call twice.
func (l *Library) FileID() (string, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(l.OpenPath, &st); err != nil {
		return "", err
	}
	return fmt.Sprintf("%d:%d", st.Dev, st.Ino), nil
}
