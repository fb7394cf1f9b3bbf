package targets

// What the reader goroutine asks about live targets (the resolver's
// lookup): safe from any goroutine.

import (
	"path/filepath"
	"sort"
	"strings"

	"github.com/cudatap/cudatap/symbolize"
	"github.com/cudatap/cudatap/symbolize/python"
	"github.com/cudatap/cudatap/tracer/event"
	"github.com/cudatap/cudatap/tracer/probe"
)

func (s *Set) target(pid uint32) *target {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.targets[int(pid)]
}

// Process returns the symbolizer of a target (its mappings from when it
// was first needed), nil if pid is none or gone.
func (s *Set) Process(pid uint32) *symbolize.Process {
	t := s.target(pid)
	if t == nil {
		return nil
	}
	t.symMu.Lock()
	defer t.symMu.Unlock()
	if t.symbolize == nil {
		p, err := symbolize.NewProcess(int(pid), s.cache)
		if err != nil {
			return nil
		}
		t.symbolize = p
	}
	return t.symbolize
}

// IsRuntimeFile reports whether the file (as a mapping names it) is a CUDA
// runtime cudatap found in process pid; for a process it never looked at
// (gone before, under shared probes), whether it is named like one.
func (s *Set) IsRuntimeFile(pid uint32, dev string, inode uint64, path string) bool {
	s.mu.Lock()
	t := s.targets[int(pid)]
	known := false
	if t != nil {
		for _, set := range []map[string]*probe.Attachment{t.attached, t.shared} {
			for _, a := range set {
				if a.Library.Layer != event.Runtime {
					continue
				}
				known = true
				if a.Library.Inode == inode && a.Library.Dev == dev {
					s.mu.Unlock()
					return true
				}
			}
		}
	}
	s.mu.Unlock()
	return !known && strings.Contains(filepath.Base(path), "cudart")
}

// Libraries lists the files of pid's own probes, sorted (none under
// shared probes).
func (s *Set) Libraries(pid uint32) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.targets[int(pid)]
	if t == nil {
		return nil
	}
	var libs []string
	seen := map[string]bool{}
	for _, a := range t.attached {
		if !seen[a.Library.Path] {
			seen[a.Library.Path] = true
			libs = append(libs, a.Library.Path)
		}
	}
	sort.Strings(libs)
	return libs
}

// AttachedLate reports whether pid ran before cudatap attached to it.
func (s *Set) AttachedLate(pid uint32) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.targets[int(pid)]
	return t != nil && t.recovered
}

// Python is pid's CPython interpreter, nil if none was found. With again,
// an interpreter found before it started is looked at anew first (it may
// run now).
func (s *Set) Python(pid uint32, again bool) *python.Interpreter {
	t := s.target(pid)
	if t == nil {
		return nil
	}
	if again {
		s.detectPython(t)
	}
	t.pyMu.Lock()
	defer t.pyMu.Unlock()
	return t.py
}

// Parent is the parent of a process of the followed tree (0: a root, or
// not of the tree).
func (s *Set) Parent(pid uint32) uint32 {
	s.treeMu.Lock()
	defer s.treeMu.Unlock()
	if p := s.tree[pid]; p != nil {
		return p.parent
	}
	return 0
}
