// Package guard is cudatap's end: a small process of its own (this binary
// again) that finishes what cudatap leaves when it dies, whatever killed it
// — the targets held at library loads continued, a thread borrowed by
// ptrace given back, collector directories removed, recordings put in place
// — and the launcher a command starts as. Init, called first in main and in
// the TestMain of every test binary that runs sessions, runs this binary as
// one of them when it was re-executed so (Docker's reexec.Init pattern: no
// init() side effect).
package guard

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cilium/ebpf"

	"github.com/cudatap/cudatap/internal/inject"
	"github.com/cudatap/cudatap/internal/procfs"
	"github.com/cudatap/cudatap/tracer/gputime"
)

// Holds that cannot outlive cudatap. A target cudatap launched (or a
// --wait-for-cuda one) is stopped by the BPF linker hook at every library
// load until cudatap has hooked the library and continues it. If cudatap
// dies in that window (kill -9, the OOM killer, a crash), nothing would
// continue it. The guardian is a small process of its own (this binary
// again) that knows which targets may be held; when cudatap is gone, and so
// are its probes (the kernel closes them with its descriptors), it
// continues them all and exits. SIGCONT to a process that runs is a no-op.

// guardianEnv marks the re-executed binary as a guardian; its value is the
// pid of the cudatap it guards.
const guardianEnv = "CUDATAP_GUARDIAN_OF"

// Init runs this binary as the guardian, the process-group anchor or a
// command's launcher when it was re-executed as one, and then exits; else
// it returns at once. Call it first in main, and in the TestMain of every
// test binary that runs sessions (they re-execute themselves).
func Init() {
	launchExec() // the launcher of a command (launcher.go)
	if v := os.Getenv(guardianEnv); v != "" {
		pid, err := strconv.Atoi(v)
		if err == nil {
			pgid, _ := strconv.Atoi(os.Getenv(anchorEnv))
			guard(pid, pgid, os.Stdin)
		}
		os.Exit(0)
	}
	if os.Getenv(anchorEnv) == "anchor" {
		anchor()
		os.Exit(0)
	}
}

// The process group anchor. A shell with job control runs cudatap in a
// process group of its own, and the command cudatap launches is in it. If
// cudatap dies while the command is held (stopped) at a library load, the
// group loses its last member with a parent outside it, in the session:
// the kernel then sends SIGHUP to the orphaned group because it has a
// stopped member, and the command dies before the guardian can continue
// it. So the guardian keeps a child of its own in cudatap's group (the
// anchor: a parent outside the group, in the session) until it has
// continued every held process. It does nothing else and ignores the
// terminal's signals meant for the job.

// anchorEnv: set to a process group id for a guardian that must anchor
// it; "anchor" for the anchor itself.
const anchorEnv = "CUDATAP_ANCHOR"

func anchor() {
	signal.Ignore(syscall.SIGINT, syscall.SIGQUIT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGPIPE,
		syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU)
	io.Copy(io.Discard, os.Stdin) // until the guardian closes it, or dies
}

// startAnchor starts the anchor of process group pgid; closing the
// returned pipe ends it.
func startAnchor(pgid int) (io.WriteCloser, *exec.Cmd) {
	exe, err := os.Executable()
	if err != nil {
		return nil, nil
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), anchorEnv+"=anchor")
	cmd.Env = slices.DeleteFunc(cmd.Env, func(e string) bool { return strings.HasPrefix(e, guardianEnv+"=") })
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pgid: pgid}
	w, err := cmd.StdinPipe()
	if err != nil || cmd.Start() != nil {
		return nil, nil // not anchored: a cudatap killed in a hold under job control loses its command, as before
	}
	return w, cmd
}

// Guardian is cudatap's end: the targets that may be held are told to it
// one line at a time ("hold PID", "free PID"; "done" when cudatap released
// every hold itself). It also loads the GPU-time collector into running
// processes ("inject PID PATH", answered "ok HANDLE" or "err WHY"): a
// process borrowed by ptrace must be given back whatever happens to
// cudatap, and the guardian outlives it. And it finishes what cudatap
// leaves when killed: collector directories removed, recordings being
// written put in place under their names ("output TEMP FINAL").
//
// A session starts its own when it needs one; a command that writes
// recordings starts one first (Start) and gives it to the session
// (Config.Guardian), so that it also covers the outputs written after the
// session, and closes it once they are in place.
type Guardian struct {
	mu  sync.Mutex
	w   io.WriteCloser
	r   *bufio.Reader
	cmd *exec.Cmd
	err error
}

// Start starts the guardian process; with anchor, for the commands
// cudatap launches into its own process group.
func Start(anchor bool) (*Guardian, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("start the hold guardian: %w", err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), guardianEnv+"="+strconv.Itoa(os.Getpid()))
	if anchor {
		cmd.Env = append(cmd.Env, anchorEnv+"="+strconv.Itoa(syscall.Getpgrp()))
	}
	// Its own process group: a Ctrl-C meant for cudatap and its target
	// must not end the guardian before it has done its work.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	w, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("start the hold guardian: %w", err)
	}
	r, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("start the hold guardian: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the hold guardian: %w", err)
	}
	// Its first word says it runs, and its anchor (if any) is in place:
	// from here a hold cannot outlive cudatap.
	br := bufio.NewReader(r)
	if line, err := br.ReadString('\n'); err != nil || line != "ready\n" {
		w.Close()
		cmd.Process.Kill()
		cmd.Wait()
		return nil, fmt.Errorf("start the hold guardian: it said %q (%v)", line, err)
	}
	return &Guardian{w: w, r: br, cmd: cmd}, nil
}

// Inject has the guardian load the library at path (as pid sees it) into
// pid with ptrace, and returns its handle.
func (g *Guardian) Inject(pid int, path string) (uint64, error) {
	if strings.ContainsAny(path, "\n") {
		return 0, fmt.Errorf("path %q has a line break", path)
	}
	rest, err := g.ask(fmt.Sprintf("inject %d %s", pid, path))
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(rest, 10, 64)
}

// HoldThread has the guardian keep thread tid of pid stopped, the rest of
// the process continued: pid is stopped as a whole (a probe's SIGSTOP at
// tid's call into CUPTI). The guardian, not cudatap, traces the thread: a
// launched command is cudatap's child, whose stops cudatap's own wait for
// it could take; and were cudatap killed, the guardian lets it go.
func (g *Guardian) HoldThread(pid, tid int) error {
	_, err := g.ask(fmt.Sprintf("holdthread %d %d", pid, tid))
	return err
}

// ReleaseThread lets a thread holdThread held go on.
func (g *Guardian) ReleaseThread(tid int) error {
	_, err := g.ask(fmt.Sprintf("releasethread %d", tid))
	return err
}

// ask sends the guardian a request and returns its answer after "ok".
func (g *Guardian) ask(line string) (string, error) {
	if g == nil {
		return "", errors.New("no guardian to do it safely")
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.err != nil {
		return "", g.err
	}
	if _, err := fmt.Fprintf(g.w, "%s\n", line); err != nil {
		g.err = err
		return "", err
	}
	answer, err := g.r.ReadString('\n')
	if err != nil {
		g.err = fmt.Errorf("the guardian is gone: %w", err)
		return "", g.err
	}
	verb, rest, _ := strings.Cut(strings.TrimSuffix(answer, "\n"), " ")
	if verb != "ok" {
		return "", errors.New(rest)
	}
	return rest, nil
}

func (g *Guardian) say(verb string, pid int) {
	if g == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.err == nil {
		_, g.err = fmt.Fprintf(g.w, "%s %d\n", verb, pid)
	}
}

// Staged tells the guardian of a GPU-time collector directory, name in the
// /tmp under root: cudatap removes it when done; if cudatap dies first, the
// guardian does.
func (g *Guardian) Staged(root, name string) { g.say2("staged", root, name) }

// unstaged: cudatap removed that directory itself.
func (g *Guardian) Unstaged(root, name string) { g.say2("unstaged", root, name) }

// say2 sends a verb with two strings, quoted: paths may hold spaces.
func (g *Guardian) say2(verb, a, b string) {
	if g == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.err == nil {
		_, g.err = fmt.Fprintf(g.w, "%s %q %q\n", verb, a, b)
	}
}

// args2 reads say2's two strings.
func args2(arg string) (a, b string, ok bool) {
	_, err := fmt.Sscanf(arg, "%q %q", &a, &b)
	return a, b, err == nil
}

// Output tells the guardian of a recording being written to temp, to be
// renamed to final once complete: if cudatap dies first, the guardian
// renames it (cut where cudatap died, which readers say).
func (g *Guardian) Output(temp, final string) { g.say2("output", temp, final) }

// FollowTree gives the guardian the followed tree's table (a BPF map, by
// id): any process of it may be stopped at a program or library load, and
// the guardian continues those that are, should cudatap die.
func (g *Guardian) FollowTree(mapID uint32) { g.say("tree", int(mapID)) }

// Hold tells the guardian that pid may be stopped at a library load.
func (g *Guardian) Hold(pid int) { g.say("hold", pid) }

// Free tells the guardian that pid is no longer held (it exited, or its
// hook is gone).
func (g *Guardian) Free(pid int) { g.say("free", pid) }

// Close ends the guardian: cudatap released every hold itself and put
// every output in place.
func (g *Guardian) Close() {
	if g == nil {
		return
	}
	g.mu.Lock()
	fmt.Fprintln(g.w, "done")
	g.w.Close()
	g.mu.Unlock()
	g.cmd.Wait()
}

// guard is the guardian's loop: it follows the holds cudatap reports on in
// and, if in ends without "done", waits until cudatap has exited (its
// probes closed) and continues every process that may be held.
func guard(parent, pgid int, in io.Reader) {
	// ptrace takes a tracee's requests from the thread that attached:
	// threads held across requests need the loop on one thread.
	runtime.LockOSThread()
	signal.Ignore(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGPIPE)
	if pgid > 0 {
		if w, cmd := startAnchor(pgid); cmd != nil {
			defer cmd.Wait()
			defer w.Close() // after the holds are released
		}
	}
	fmt.Println("ready")
	// pidfd first: if the parent is already gone, the pidfd of whatever
	// now has its pid must not be waited on.
	pidfd, err := unix.PidfdOpen(parent, 0)
	if err != nil || os.Getppid() != parent {
		pidfd = -1
	}
	held := map[int]bool{}
	heldThreads := map[int]*inject.Held{} // by tid
	staged := map[[2]string]bool{}        // root, name
	var outputs []partialOutput
	var tree *ebpf.Map // the followed tree, opened while cudatap holds it
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		verb, arg, _ := strings.Cut(sc.Text(), " ")
		pid, _ := strconv.Atoi(arg)
		switch verb {
		case "staged", "unstaged":
			root, name, _ := args2(arg)
			if verb == "unstaged" {
				delete(staged, [2]string{root, name})
			} else if len(staged) < maxStaged {
				staged[[2]string{root, name}] = true
			}
		case "output":
			temp, final, ok := args2(arg)
			if o, opened := openPartial(temp, final); ok && opened && len(outputs) < maxStaged {
				outputs = append(outputs, o)
			}
		case "tree":
			if m, err := ebpf.NewMapFromID(ebpf.MapID(pid)); err == nil {
				tree = m
			}
		case "hold":
			held[pid] = true
		case "free":
			delete(held, pid)
		case "inject":
			_, path, _ := strings.Cut(arg, " ")
			pid, _ = strconv.Atoi(strings.Fields(arg)[0])
			h, err := inject.Dlopen(pid, path)
			if err != nil {
				fmt.Printf("err %s\n", strings.ReplaceAll(err.Error(), "\n", " "))
			} else {
				fmt.Printf("ok %d\n", h)
			}
		case "holdthread":
			tid := 0
			if f := strings.Fields(arg); len(f) == 2 {
				pid, _ = strconv.Atoi(f[0])
				tid, _ = strconv.Atoi(f[1])
			}
			h, err := inject.HoldThread(pid, tid)
			if err == nil && heldThreads[tid] == nil && len(heldThreads) < maxStaged {
				heldThreads[tid] = h
				fmt.Println("ok")
			} else if err == nil {
				h.Release()
				fmt.Println("err too many threads held")
			} else {
				fmt.Printf("err %s\n", strings.ReplaceAll(err.Error(), "\n", " "))
			}
		case "releasethread":
			if h := heldThreads[pid]; h == nil {
				fmt.Println("err not held")
			} else if err := h.Release(); err != nil {
				delete(heldThreads, pid)
				fmt.Printf("err %s\n", strings.ReplaceAll(err.Error(), "\n", " "))
			} else {
				delete(heldThreads, pid)
				fmt.Println("ok")
			}
		case "done":
			return
		}
	}
	for _, h := range heldThreads {
		h.Release() // cudatap is gone: its hand-over will not finish
	}
	// cudatap is dying or dead. Its probes go with its descriptors, which
	// the kernel closes before the process counts as exited: once the
	// pidfd says so, no probe can stop a target again.
	if pidfd >= 0 {
		fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
		for {
			if _, err := unix.Poll(fds, -1); err != unix.EINTR {
				break
			}
		}
	} else {
		// No pidfd (Linux < 5.3): orphaned once the parent has exited.
		for os.Getppid() == parent {
			time.Sleep(10 * time.Millisecond)
		}
	}
	for pid := range held {
		unix.Kill(pid, unix.SIGCONT)
	}
	continueTree(tree)
	for d := range staged {
		gputime.RemoveStaging(d[0], d[1]) // a container that ended took its /tmp along
	}
	for _, o := range outputs {
		o.finish()
	}
}

// continueTree continues the processes of the followed tree that are
// stopped: cudatap's probes are gone with it, so none can be stopped again.
func continueTree(tree *ebpf.Map) {
	if tree == nil {
		return
	}
	defer tree.Close()
	var word uint32
	var bits uint64
	it := tree.Iterate() // a bitmap by pid: word i holds pids 64i to 64i+63
	for it.Next(&word, &bits) {
		for b := 0; bits != 0; b++ {
			if bits&1 != 0 {
				pid := int(word)*64 + b
				if st, err := procfs.Stat(pid); err == nil && st.State == 'T' {
					unix.Kill(pid, unix.SIGCONT)
				}
			}
			bits >>= 1
		}
	}
}

// partialOutput is a recording cudatap writes to a temporary file, to be
// renamed to its final name: the directory is held open from the start,
// so that a link planted in its path later is not followed.
type partialOutput struct {
	dir         int
	temp, final string // names in dir
}

func openPartial(temp, final string) (partialOutput, bool) {
	if filepath.Dir(temp) != filepath.Dir(final) {
		return partialOutput{}, false
	}
	dir, err := unix.Open(filepath.Dir(temp), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return partialOutput{}, false
	}
	return partialOutput{dir: dir, temp: filepath.Base(temp), final: filepath.Base(final)}, true
}

// finish puts the temporary file in place under its final name, readable
// as cudatap would have left it (0644), if it is still cudatap's: a
// regular file of this user's. Readers say where it was cut.
func (o partialOutput) finish() {
	defer unix.Close(o.dir)
	fd, err := unix.Openat(o.dir, o.temp, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return // cudatap renamed it itself, or removed it (the session failed)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || st.Uid != uint32(os.Geteuid()) {
		return
	}
	unix.Fchmod(fd, 0o644)
	unix.Renameat(o.dir, o.temp, o.dir, o.final)
}

// maxStaged bounds the collector directories the guardian keeps track of
// (one per process measured at once: the session allows 64).
const maxStaged = 1 << 12
