package targets

// Shared probes: under --all and --container, each CUDA library file is
// hooked once, for every process that maps it, and the BPF side decides per
// process which hits count (bpf/cudatap.bpf.c, admit). A process that maps
// a file already hooked is traced from its first call, with no attach of
// its own; one that exits leaves nothing to detach. Only a file never seen
// before waits for discovery.

import (
	"fmt"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/cudatap/cudatap/internal/procfs"
	"github.com/cudatap/cudatap/tracer/event"
	"github.com/cudatap/cudatap/tracer/probe"
)

// sharedProbes reports whether this session hooks library files for every
// process: --all, and --container where the kernel can tell containers
// apart in BPF (a cgroup v2 hierarchy, also on hybrid hosts; without one,
// --container attaches per process).
func (s *Set) sharedProbes() bool {
	return s.cfg.All || (s.cfg.Container != "" && s.cgroup2 != "") || s.following()
}

// SharedProbes reports whether library files are hooked for every process
// (then BPF keeps per-process state that the exited must leave).
func (s *Set) SharedProbes() bool { return s.sharedProbes() }

// GoLive says the processes running at the start are attached: the
// processes adopted from now on started after cudatap.
func (s *Set) GoLive() { s.live = true }

// sharedWant is what a shared probe set hooks of a layer: everything a
// process could need, the per-process rule being applied in BPF. Runtime
// launches are the driver's (every runtime launch enters cuLaunchKernel).
func sharedWant(s *event.Spec) bool {
	return !(s.Layer == event.Runtime && s.Class == event.ClassLaunch)
}

// sharedBits marks what the BPF side needs to apply PolicyFor per process.
func sharedBits(s *event.Spec) uint64 {
	switch {
	case s.Layer == event.Runtime:
		return event.CookieRuntime
	case s.Layer == event.Driver && s.Class != event.ClassLaunch && s.Class != event.ClassFuncName && !s.DriverOnly:
		return event.CookieShadowed
	}
	return 0
}

// adopt traces pid through the shared probes, hooking the files it maps
// that no process mapped before.
func (s *Set) adopt(pid int, d *probe.Discovery) error {
	s.mu.Lock()
	t := s.targets[pid]
	if t == nil {
		t = &target{pid: pid, attached: map[string]*probe.Attachment{}, policy: map[string]policy{}, shared: map[string]*probe.Attachment{}}
		s.targets[pid] = t
	}
	s.mu.Unlock()
	if s.cfg.Container != "" {
		s.allowCgroupOf(pid)
	}
	for _, lib := range d.Libraries {
		t.layers |= 1 << lib.Layer
	}
	if t.layers&(1<<event.Runtime) != 0 {
		if err := s.tr.SetRuntime(pid); err != nil {
			s.log.Warn("cannot mark the process as using the runtime; its first driver calls may count twice", "pid", pid, "err", err)
		}
	}
	for i := range d.Libraries {
		s.hookShared(t, &d.Libraries[i])
	}
	if t.layers&(1<<event.Driver) == 0 && t.layers&(1<<event.Runtime) != 0 {
		s.prehookDriver(t, d)
	}
	if !s.live && pid != s.launched {
		// Running before cudatap came: kernels it loaded earlier are named
		// through the runtime's launch stubs, and what it set up earlier
		// is recovered where it can be.
		s.runtimeLaunches(t, d, false)
		if !t.recovered {
			t.recovered = true
			s.note(Note{Kind: AttachedLate, PID: uint32(pid)})
			s.recoverPinned(pid)
		}
	}
	s.detectPython(t)
	t.mapsHash = mapsHash(pid)
	s.Process(uint32(pid)) // its mappings while it lives (see attachProcess)
	// A launched tree has GPU times from its environment (the CUDA driver
	// loads the collector in every process); processes found running may
	// get it through the session.
	if t.layers&(1<<event.Runtime|1<<event.Driver) != 0 && !s.cfg.Launching {
		s.note(Note{Kind: Adopted, PID: uint32(pid)})
	}
	return nil
}

// hookShared makes sure lib's file carries the shared probes of its layer,
// and notes them as t's.
func (s *Set) hookShared(t *target, lib *probe.Library) bool {
	lib = reachable(lib)
	id, err := lib.FileID()
	if err != nil {
		s.log.Debug("shared probes", "library", lib.Path, "pid", t.pid, "err", err)
		return false
	}
	key := id + "/" + lib.Layer.String()
	s.mu.Lock()
	a := s.shared[key]
	s.mu.Unlock()
	if a == nil {
		bits := sharedBits
		if s.cfg.AggregateLaunches {
			bits = func(sp *event.Spec) uint64 {
				if sp.Class == event.ClassLaunch {
					c := sharedBits(sp) | sp.AggregateCookie()
					if s.cfg.AggregateWithoutStream {
						c = sharedBits(sp) | event.CookieAggregate
					}
					if s.cfg.LaunchTimes {
						c |= event.CookieAggregateTime
					}
					return c
				}
				return sharedBits(sp)
			}
		}
		if a, err = s.tr.AttachShared(lib, sharedWant, bits, s.probeFilter()); err != nil {
			s.attachFailed(err)
			s.log.Warn("cannot hook library", "library", lib.Path, "pid", t.pid, "err", err)
			return false
		}
		s.log.Info("attached for every process", "library", lib.Path, "layer", lib.Layer.String(),
			"symbols", len(a.Hooked), "missing", len(a.Missing), "first pid", t.pid)
	}
	s.mu.Lock()
	s.shared[key] = a
	t.shared[key] = a
	s.mu.Unlock()
	return true
}

// reachable returns lib opened by its path as cudatap sees it, when that is
// the same file: shared probes outlive the process that showed the file,
// which may be gone a moment later (the first process to map a file under
// --all is often short-lived), and with it its /proc/PID/map_files path.
func reachable(lib *probe.Library) *probe.Library {
	var st syscall.Stat_t
	if lib.OpenPath == lib.Path || syscall.Stat(lib.Path, &st) != nil || st.Ino != lib.Inode {
		return lib
	}
	l := *lib
	l.OpenPath = lib.Path
	return &l
}

// prehookDriver hooks the driver a process with a runtime will load. The
// runtime loads libcuda.so.1 at its first call that needs it: were its
// file hooked only once the load is seen, the first process to load it
// would make its first driver calls (launches among them) unseen. Every
// libcuda.so.1 the dynamic linker could pick for the process is hooked
// (the runtime's own directory, LD_LIBRARY_PATH, the usual library
// directories, in the process's root); a file the process never loads
// costs nothing.
func (s *Set) prehookDriver(t *target, d *probe.Discovery) {
	var dirs []string
	for _, lib := range d.Libraries {
		if lib.Layer == event.Runtime {
			dirs = append(dirs, filepath.Dir(lib.Path))
		}
	}
	dirs = append(dirs, filepath.SplitList(procfs.Getenv(t.pid, "LD_LIBRARY_PATH"))...)
	dirs = append(dirs, "/usr/local/nvidia/lib64", "/usr/lib/x86_64-linux-gnu", "/lib/x86_64-linux-gnu",
		"/usr/lib64", "/lib64", "/usr/lib", "/usr/lib/wsl/lib")
	seen := map[string]bool{}
	for _, dir := range dirs {
		// The toolkit's stub libcuda is for linking only; it never runs.
		if dir == "" || !filepath.IsAbs(dir) || seen[dir] || strings.Contains(dir, "/stubs") {
			continue
		}
		seen[dir] = true
		path := filepath.Join(dir, "libcuda.so.1")
		lib, err := probe.OpenDriver(fmt.Sprintf("/proc/%d/root%s", t.pid, path), path, s.cache)
		if err != nil {
			continue
		}
		if s.hookShared(t, lib) {
			s.mu.Lock() // targets' fields are read under mu
			t.driverReady = true
			s.mu.Unlock()
		}
	}
}

// allowCgroupOf lets the shared probes count the processes of pid's cgroup.
func (s *Set) allowCgroupOf(pid int) {
	text, err := procfs.Cgroup(pid)
	if err != nil {
		return
	}
	for _, line := range strings.Split(text, "\n") {
		path, ok := strings.CutPrefix(line, "0::")
		if !ok {
			continue
		}
		var st syscall.Stat_t
		if err := syscall.Stat(filepath.Join(s.cgroup2, path), &st); err != nil {
			s.log.Warn("cannot find the process's cgroup; it is not traced", "pid", pid, "cgroup", path, "err", err)
			return
		}
		if s.cgroups[st.Ino] {
			return
		}
		if err := s.tr.AllowCgroup(st.Ino); err != nil {
			s.attachFailed(err)
			s.log.Warn("cannot trace the process's cgroup", "pid", pid, "err", err)
			return
		}
		s.cgroups[st.Ino] = true
		return
	}
}

// CloseShared detaches the shared probes and the dynamic-linker hooks of
// the watch, once every process's own probes are gone (CloseAll).
func (s *Set) CloseShared() {
	s.closeLoaders()
	s.mu.Lock()
	shared := s.shared
	s.shared = map[string]*probe.Attachment{}
	s.mu.Unlock()
	for _, a := range shared {
		a.Close()
	}
}
