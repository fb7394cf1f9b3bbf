package objfile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/cudatap/cudatap/internal/procfs"
)

// Mapping is one line of /proc/PID/maps.
type Mapping struct {
	Start, End uint64 // [Start, End) in the target's address space
	Offset     uint64 // file offset of Start
	Perms      string // e.g. "r-xp"
	Dev        string // "major:minor" in hex, e.g. "fd:01"
	Inode      uint64
	Path       string // as the target sees it, without the " (deleted)" suffix
	Deleted    bool   // the kernel marked the path " (deleted)"
}

// deletedSuffix is appended by the kernel to the path of an unlinked file.
const deletedSuffix = " (deleted)"

// Contains reports whether addr lies in the mapping.
func (m Mapping) Contains(addr uint64) bool { return addr >= m.Start && addr < m.End }

// Exec reports whether the mapping is executable.
func (m Mapping) Exec() bool { return len(m.Perms) >= 3 && m.Perms[2] == 'x' }

// IsFile reports whether the mapping is backed by a file (as opposed to
// anonymous memory, the heap, stacks, [vdso], ...).
func (m Mapping) IsFile() bool { return m.Inode != 0 && m.Path != "" && m.Path[0] != '[' }

// FileOffset converts a runtime address inside the mapping to an offset in
// the backing file.
func (m Mapping) FileOffset(addr uint64) uint64 { return addr - m.Start + m.Offset }

// mapFilesState caches whether /proc/PID/map_files can be used: opening
// those links needs CAP_SYS_ADMIN (or CAP_CHECKPOINT_RESTORE) in the initial
// user namespace, which is a property of this process, not of the target.
var mapFilesState atomic.Int32 // 0 unknown, 1 usable, 2 not permitted

// OpenPath returns a path through which the file backing m can be opened
// from this (host) mount namespace, or "" if m is not file-backed.
//
// It prefers /proc/PID/map_files/<start>-<end>: that magic link is resolved
// by the kernel straight to the mapped file, so it works for deleted files
// and files in other mount namespaces and involves no path walk inside the
// container. Without the privilege to use it, it falls back to
// /proc/PID/root/<path>; [Open] and [Cache.Open] resolve such paths with
// openat2(RESOLVE_IN_ROOT) so that symlinks planted in the container cannot
// point outside it.
func (m Mapping) OpenPath(pid int) string {
	if !m.IsFile() {
		return ""
	}
	mf := fmt.Sprintf("/proc/%d/map_files/%x-%x", pid, m.Start, m.End)
	switch mapFilesState.Load() {
	case 1:
		return mf
	case 0:
		_, err := os.Stat(mf)
		switch {
		case err == nil:
			mapFilesState.Store(1)
			return mf
		case errors.Is(err, os.ErrPermission):
			mapFilesState.Store(2)
		}
	}
	return fmt.Sprintf("/proc/%d/root%s", pid, m.Path)
}

// splitProcRoot splits "/proc/PID/root/REST" into "/proc/PID/root" and
// "REST"; PID may be "self".
func splitProcRoot(path string) (root, rel string, ok bool) {
	rest, ok := strings.CutPrefix(path, "/proc/")
	if !ok {
		return "", "", false
	}
	i := strings.IndexByte(rest, '/')
	if i <= 0 {
		return "", "", false
	}
	pid := rest[:i]
	if pid != "self" && strings.Trim(pid, "0123456789") != "" {
		return "", "", false
	}
	rel, ok = strings.CutPrefix(rest[i:], "/root/")
	if !ok || rel == "" {
		return "", "", false
	}
	return path[:len("/proc/")+i+len("/root")], rel, true
}

// ReadMaps reads and parses /proc/PID/maps. When the process does not
// exist (any more), the error wraps os.ErrNotExist.
func ReadMaps(pid int) ([]Mapping, error) {
	data, err := procfs.Maps(pid)
	if err != nil {
		return nil, err
	}
	return parseMaps(data)
}

// ParseMaps parses the /proc/PID/maps format.
func ParseMaps(r io.Reader) ([]Mapping, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	return parseMaps(data)
}

func parseMaps(data []byte) ([]Mapping, error) {
	maps := make([]Mapping, 0, bytes.Count(data, []byte{'\n'})+1)
	// Permissions and device strings repeat on almost every line; intern
	// them so that a maps file of thousands of lines does not allocate
	// thousands of copies.
	intern := make(map[string]string)
	in := func(b []byte) string {
		if s, ok := intern[string(b)]; ok {
			return s
		}
		s := string(b)
		intern[s] = s
		return s
	}
	for lineNo := 1; len(data) > 0; lineNo++ {
		var line []byte
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i], data[i+1:]
		} else {
			line, data = data, nil
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		m, err := parseMapsLine(line, in)
		if err != nil {
			return nil, fmt.Errorf("maps line %d: %w", lineNo, err)
		}
		maps = append(maps, m)
	}
	return maps, nil
}

// parseMapsLine parses
//
//	7f3c1c000000-7f3c1c021000 r-xp 00001000 fd:01 1234567    /usr/lib/libc.so.6
//
// The path is everything after the inode and the run of spaces following
// it, so paths containing spaces survive.
func parseMapsLine(line []byte, intern func([]byte) string) (Mapping, error) {
	var m Mapping
	field := func() []byte {
		line = bytes.TrimLeft(line, " ")
		i := bytes.IndexByte(line, ' ')
		if i < 0 {
			i = len(line)
		}
		f := line[:i]
		line = line[i:]
		return f
	}
	hex := func(b []byte) (uint64, error) { return strconv.ParseUint(string(b), 16, 64) }

	rng := field()
	dash := bytes.IndexByte(rng, '-')
	if dash < 0 {
		return m, fmt.Errorf("bad address range %q", rng)
	}
	var err error
	if m.Start, err = hex(rng[:dash]); err != nil {
		return m, fmt.Errorf("bad start address: %w", err)
	}
	if m.End, err = hex(rng[dash+1:]); err != nil {
		return m, fmt.Errorf("bad end address: %w", err)
	}
	if m.End < m.Start {
		return m, fmt.Errorf("bad address range %q", rng)
	}
	perms := field()
	if len(perms) != 4 {
		return m, fmt.Errorf("bad permissions %q", perms)
	}
	m.Perms = intern(perms)
	if m.Offset, err = hex(field()); err != nil {
		return m, fmt.Errorf("bad offset: %w", err)
	}
	dev := field()
	if bytes.IndexByte(dev, ':') < 0 {
		return m, fmt.Errorf("bad device %q", dev)
	}
	m.Dev = intern(dev)
	if m.Inode, err = strconv.ParseUint(string(field()), 10, 64); err != nil {
		return m, fmt.Errorf("bad inode: %w", err)
	}
	path := strings.TrimLeft(string(line), " ")
	if p, ok := strings.CutSuffix(path, deletedSuffix); ok && m.Inode != 0 {
		path, m.Deleted = p, true
	}
	m.Path = path
	return m, nil
}

// ObjectFile is one file mapped into a process, with all its mappings.
type ObjectFile struct {
	Dev      string
	Inode    uint64
	Path     string // as the target sees it
	Deleted  bool
	Mappings []Mapping // in address order
}

// OpenPath is [Mapping.OpenPath] for the object's first mapping.
func (o ObjectFile) OpenPath(pid int) string {
	if len(o.Mappings) == 0 {
		return ""
	}
	return o.Mappings[0].OpenPath(pid)
}

// Mapping returns the mapping of o containing the runtime address addr.
func (o ObjectFile) Mapping(addr uint64) (Mapping, bool) {
	for _, m := range o.Mappings {
		if m.Contains(addr) {
			return m, true
		}
	}
	return Mapping{}, false
}

// Bias returns load bias of the object: runtime address = ELF vaddr + bias.
// f must be the object's ELF file. It is 0 for non-PIE executables.
func (o ObjectFile) Bias(f *File) (uint64, bool) {
	for _, m := range o.Mappings {
		if v, ok := f.VAddr(m.Offset); ok {
			return m.Start - v, true
		}
	}
	return 0, false
}

// ObjectFiles groups file-backed mappings by backing file (device and
// inode) and returns one entry per file, in order of first appearance.
// Anonymous and pseudo mappings ([heap], [vdso], ...) are left out.
func ObjectFiles(maps []Mapping) []ObjectFile {
	type key struct {
		dev   string
		inode uint64
	}
	idx := make(map[key]int)
	var objs []ObjectFile
	for _, m := range maps {
		if !m.IsFile() {
			continue
		}
		k := key{m.Dev, m.Inode}
		i, ok := idx[k]
		if !ok {
			i = len(objs)
			idx[k] = i
			objs = append(objs, ObjectFile{Dev: m.Dev, Inode: m.Inode, Path: m.Path, Deleted: m.Deleted})
		}
		objs[i].Mappings = append(objs[i].Mappings, m)
	}
	return objs
}
