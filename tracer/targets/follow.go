package targets

// Following the job. A training or serving job is a tree of processes:
// torchrun and its workers, a shell script and the Python it runs,
// DataLoader workers, vLLM's engine processes. record -- CMD traces the
// command and every process it starts, at any depth (and -p PID --follow a
// running process and what it starts from then on), each from its first
// CUDA call:
//
//   - the tree lives in the kernel (bpf/cudatap.bpf.c, tree_fork): a
//     process started by one of it joins it at fork, before it runs, so a
//     worker that lives a millisecond is traced as a long one is;
//   - the probes are shared (shared.go): one link per library file, whose
//     hits count for the tree's processes only (probe.TreeProcesses); a
//     forked process inherits its parent's hooked mappings;
//   - a process of the tree that executes a program is stopped there
//     (tree_exec), and one that loads a library at the dynamic linker's
//     hook, until what it maps is hooked (handleRescan);
//   - the guardian knows the tree's table: should cudatap die, it continues
//     every process of it that is stopped.
// The session ends when every process of the tree has exited (or at -d,
// or Ctrl-C).

import (
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/cudatap/cudatap/internal/procfs"
	"github.com/cudatap/cudatap/tracer/probe"
)

// maxTree bounds the processes of the tree user space keeps (the BPF table
// holds as many); past it, processes are counted (treeLost), not followed.
const maxTree = 1 << 16

// treeProc is what user space keeps of a process of the tree.
type treeProc struct {
	parent uint32
	exited bool
}

// following reports whether this session follows process trees.
func (s *Set) following() bool { return s.cfg.Follow }

// probeFilter says which processes the session's shared probes count for.
func (s *Set) probeFilter() probe.Filter {
	switch {
	case s.following():
		return probe.TreeProcesses
	case s.cfg.Container != "":
		return probe.CgroupProcesses
	}
	return probe.AllProcesses
}

// StartFollowing turns the tree on (Config.Follow): from here, what a
// process of it starts joins it, and a program one executes is held until
// hooked.
func (s *Set) StartFollowing() error {
	if err := s.tr.StartFollow(true); err != nil {
		return err
	}
	if id, err := s.tr.TreeMapID(); err == nil {
		s.guard.FollowTree(uint32(id))
	} else {
		s.log.Warn("the guardian cannot see the followed processes: a process stopped at a program or library load when cudatap dies may stay stopped", "err", err)
	}
	return nil
}

// followRoot makes pid a root of the tree (its parent, if known, noted).
func (s *Set) followRoot(pid, parent int) error {
	if err := s.tr.AddToTree(pid); err != nil {
		return err
	}
	s.treeAdd(uint32(pid), uint32(parent))
	return nil
}

// FollowRunning makes pid and the processes it has started (at any depth,
// as they are now) roots of the tree: -p PID --follow.
func (s *Set) FollowRunning(pid int) error {
	if err := s.followRoot(pid, 0); err != nil {
		return err
	}
	for _, child := range descendants(pid) {
		if err := s.followRoot(child.pid, child.parent); err != nil {
			return err
		}
		s.consider(child.pid)
	}
	return nil
}

type pidParent struct{ pid, parent int }

// descendants lists the processes pid started, at any depth, from
// /proc/PID/task/TID/children (Linux 3.5, CONFIG_PROC_CHILDREN), breadth
// first; bounded by maxTree.
func descendants(pid int) []pidParent {
	var out []pidParent
	queue := []int{pid}
	seen := map[int]bool{pid: true}
	for len(queue) > 0 && len(out) < maxTree {
		p := queue[0]
		queue = queue[1:]
		tasks, _ := os.ReadDir("/proc/" + strconv.Itoa(p) + "/task")
		for _, t := range tasks {
			b, err := os.ReadFile("/proc/" + strconv.Itoa(p) + "/task/" + t.Name() + "/children")
			if err != nil {
				continue
			}
			for _, f := range strings.Fields(string(b)) {
				c, err := strconv.Atoi(f)
				if err != nil || seen[c] {
					continue
				}
				seen[c] = true
				out = append(out, pidParent{pid: c, parent: p})
				queue = append(queue, c)
			}
		}
	}
	return out
}

// treeAdd notes a process of the tree (any goroutine).
func (s *Set) treeAdd(pid, parent uint32) {
	s.treeMu.Lock()
	defer s.treeMu.Unlock()
	if _, ok := s.tree[pid]; ok {
		return
	}
	if len(s.tree) >= maxTree {
		s.treeLost++
		return
	}
	s.tree[pid] = &treeProc{parent: parent}
}

// TreeRoots lists the processes of the tree known now (the roots, before
// the session goes live), sorted.
func (s *Set) TreeRoots() []uint32 {
	s.treeMu.Lock()
	defer s.treeMu.Unlock()
	out := make([]uint32, 0, len(s.tree))
	for pid := range s.tree {
		out = append(out, pid)
	}
	slices.Sort(out)
	return out
}

// inTree reports whether pid is a process of the tree cudatap knows of.
func (s *Set) inTree(pid int) bool {
	s.treeMu.Lock()
	defer s.treeMu.Unlock()
	p := s.tree[uint32(pid)]
	return p != nil && !p.exited
}

// treeLives reports whether a process of the tree is still running, and
// notes those that ended (control loop).
func (s *Set) treeLives() bool {
	s.treeMu.Lock()
	defer s.treeMu.Unlock()
	alive := false
	for pid, p := range s.tree {
		if p.exited {
			continue
		}
		if procfs.Alive(int(pid)) {
			alive = true
		} else {
			p.exited = true
		}
	}
	return alive
}

// Forked notes a process a process of the tree started (the reader's
// fork record): it belongs to the tree from here.
func (s *Set) Forked(pid, parent uint32) { s.treeAdd(pid, parent) }

// HookLaunched hooks the command cudatap launched, held at its first
// instruction: following, as the root of the tree (what it maps now, its
// executable and dynamic linker, through shared probes; what it and its
// descendants load later, at holds); else on its own.
func (s *Set) HookLaunched(pid int) error {
	if !s.following() {
		return s.attachProcess(pid, true, false)
	}
	s.launched = pid
	if err := s.followRoot(pid, 0); err != nil {
		return err
	}
	s.consider(pid)
	return nil
}
