package tracer

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cudatap/cudatap/tracer/guard"
)

// launched is a command cudatap started itself.
type launched struct {
	pid     int
	cmd     *exec.Cmd
	done    chan struct{}
	exit    Exit
	stopped bool // cudatap ended it (deadline, signal)
}

// Exit is how a launched command ended.
type Exit struct {
	Code   int            // exit status; 128+N when killed by signal N (as a shell reports it); -1 unknown
	Signal syscall.Signal // the signal that killed it, 0 if it exited
	// Stopped says cudatap ended the command itself (the recording's
	// deadline, Ctrl-C): its status is then not the command's own.
	Stopped bool
}

// launch starts the command stopped at its first instruction, hooks what is
// already mapped (the executable, with a statically linked runtime; the
// dynamic linker) and lets it run. The linker hook stops the process again
// at every library load until the new library is hooked, so not one call
// into CUDA goes unseen.
//
// The command must not depend on cudatap staying alive, at any instant. It
// starts as a launcher (this binary again) blocked on a pipe; cudatap seizes
// it with ptrace, asking for an exec event (PTRACE_O_TRACEEXEC), and lets it
// go; it executes the command, which stops in that event. The ptrace stop
// is then traded for an ordinary SIGSTOP, which cudatap ends once it has
// hooked the command, or the guardian if cudatap died. Were cudatap killed
// at any point, the launcher would find its pipe closed and go ahead, the
// kernel would let a command in its exec event run, and the guardian would
// continue a stopped one. (The exec stop of PTRACE_TRACEME, used before,
// is a SIGTRAP that kills the program when its tracer is gone: seen in the
// kill test.)
func (s *Session) launch() (*launched, error) {
	type result struct {
		l   *launched
		err error
	}
	res := make(chan result, 1)
	go func() {
		// ptrace requests must come from the thread that attached.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		name := s.cfg.Command[0]
		fail := func(cmd *exec.Cmd, err error) {
			if cmd != nil && cmd.Process != nil {
				cmd.Process.Kill()
				cmd.Wait()
			}
			res <- result{err: fmt.Errorf("start %s: %w", name, err)}
		}
		path, err := exec.LookPath(name)
		if err != nil {
			fail(nil, err)
			return
		}
		self, err := os.Executable()
		if err != nil {
			fail(nil, fmt.Errorf("find cudatap's own binary to launch it through: %w", err))
			return
		}
		goAhead, w, err := os.Pipe()
		if err != nil {
			fail(nil, err)
			return
		}
		cmd := exec.Command(self, s.cfg.Command[1:]...)
		cmd.Args[0] = name // the command's own argv[0]
		cmd.Env = append(os.Environ(), guard.LauncherEnv+"="+path)
		if s.cfg.GPUTimes {
			inject, err := s.gpuTimesForLaunch(cmd.Env)
			if err != nil {
				fail(nil, err)
				return
			}
			if inject != "" {
				cmd.Env = append(cmd.Env, inject)
			}
		}
		if inject, err := s.nvtxForLaunch(cmd.Env); err != nil {
			s.log.Warn("the program's NVTX ranges will not be drawn", "err", err)
		} else if inject != "" {
			cmd.Env = append(cmd.Env, inject)
		}
		cmd.Stdin, cmd.Stdout, cmd.Stderr = s.cfg.Stdin, s.cfg.Stdout, s.cfg.Stderr
		cmd.ExtraFiles = []*os.File{goAhead} // its descriptor 3
		err = cmd.Start()
		goAhead.Close()
		if err != nil {
			w.Close()
			fail(nil, err)
			return
		}
		pid := cmd.Process.Pid
		// Seize it while it waits, asking for the exec event, then let it go.
		_, _, errno := syscall.Syscall6(syscall.SYS_PTRACE, unix.PTRACE_SEIZE, uintptr(pid), 0, unix.PTRACE_O_TRACEEXEC, 0, 0)
		w.Write([]byte{1})
		w.Close()
		if errno != 0 {
			fail(cmd, fmt.Errorf("seize the launcher with ptrace: %w (cudatap needs CAP_SYS_PTRACE, and ptrace must not be disabled: kernel.yama.ptrace_scope below 3; `cudatap doctor` checks the capability)", errno))
			return
		}
		var ws syscall.WaitStatus
		for {
			if _, err := syscall.Wait4(pid, &ws, 0, nil); err != nil || !ws.Stopped() {
				fail(cmd, fmt.Errorf("it ended before running (%v, %v)", err, ws))
				return
			}
			if ws.TrapCause() == unix.PTRACE_EVENT_EXEC {
				break
			}
			// Any other stop before the exec: pass its signal on.
			if err := syscall.PtraceCont(pid, int(ws.StopSignal())); err != nil {
				fail(cmd, fmt.Errorf("continue the launcher: %w", err))
				return
			}
		}
		// Trade the ptrace stop for an ordinary SIGSTOP while hooking (the
		// guardian told first); the pending SIGSTOP is taken before the
		// command runs an instruction.
		s.guard.Hold(pid)
		syscall.Kill(pid, syscall.SIGSTOP)
		if s.cfg.GPUTimes {
			s.expectGPUTimes(pid)
		}
		var attachErr error
		if err := syscall.PtraceDetach(pid); err != nil {
			attachErr = fmt.Errorf("release %d from ptrace: %w", pid, err)
		} else if _, err := syscall.Wait4(pid, &ws, syscall.WUNTRACED, nil); err != nil || !ws.Stopped() {
			attachErr = fmt.Errorf("the process did not stop for hooking (%v)", err)
		}
		if attachErr == nil {
			attachErr = s.targets.HookLaunched(pid)
		}
		syscall.Kill(pid, syscall.SIGCONT)
		if attachErr != nil {
			fail(cmd, attachErr)
			return
		}
		l := &launched{pid: pid, cmd: cmd, done: make(chan struct{}), exit: Exit{Code: -1}}
		go func() {
			cmd.Wait()
			l.exit = exitOf(cmd.ProcessState)
			close(l.done)
		}()
		res <- result{l: l}
	}()
	r := <-res
	return r.l, r.err
}

// exitOf reads a wait status the way a shell reports it.
func exitOf(ps *os.ProcessState) Exit {
	if ps == nil {
		return Exit{Code: -1}
	}
	ws, ok := ps.Sys().(syscall.WaitStatus)
	switch {
	case ok && ws.Signaled():
		return Exit{Code: 128 + int(ws.Signal()), Signal: ws.Signal()}
	case ok && ws.Exited():
		return Exit{Code: ws.ExitStatus()}
	}
	return Exit{Code: ps.ExitCode()}
}

// pass hands the command a signal cudatap got (kill -INT/-TERM cudatap), as
// it would have got it without cudatap; one the terminal sent to the
// foreground process group (Ctrl-C, a hangup), where the command is too,
// it got already. It reports whether it sent it.
func (l *launched) pass(sig syscall.Signal) bool {
	if (sig == syscall.SIGINT || sig == syscall.SIGQUIT || sig == syscall.SIGHUP) && foregroundJob() {
		return false
	}
	return syscall.Kill(l.pid, sig) == nil
}

// foregroundJob reports whether cudatap's process group is the foreground
// group of its controlling terminal: the terminal's signals reach it all.
func foregroundJob() bool {
	tty, err := os.OpenFile("/dev/tty", os.O_RDONLY|syscall.O_NOCTTY, 0)
	if err != nil {
		return false // no controlling terminal
	}
	defer tty.Close()
	pgrp, err := unix.IoctlGetInt(int(tty.Fd()), unix.TIOCGPGRP)
	return err == nil && pgrp == syscall.Getpgrp()
}

// stop ends the command if it still runs (SIGTERM, then SIGKILL after 5 s)
// and returns how it ended.
func (l *launched) stop() Exit {
	select {
	case <-l.done:
		return l.exit
	default:
	}
	l.stopped = true
	l.cmd.Process.Signal(syscall.SIGTERM)
	// A process stopped by the linker hook must be continued to die.
	l.cmd.Process.Signal(syscall.SIGCONT)
	select {
	case <-l.done:
	case <-time.After(5 * time.Second):
		l.cmd.Process.Kill()
		<-l.done
	}
	e := l.exit
	e.Stopped = true
	return e
}
