package tracer

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"time"
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

// launch starts the command stopped at its first instruction (ptrace stops
// a tracee right after execve), hooks what is already mapped (the executable,
// with a statically linked runtime; the dynamic linker) and lets it run. The
// linker hook stops the process again at every library load until the new
// library is hooked, so not one call into CUDA goes unseen.
func (s *Session) launch() (*launched, error) {
	type result struct {
		l   *launched
		err error
	}
	res := make(chan result, 1)
	go func() {
		// ptrace requests must come from the thread that forked the tracee.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		cmd := exec.Command(s.cfg.Command[0], s.cfg.Command[1:]...)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = s.cfg.Stdin, s.cfg.Stdout, s.cfg.Stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{Ptrace: true}
		if err := cmd.Start(); err != nil {
			res <- result{err: fmt.Errorf("start %s: %w", s.cfg.Command[0], err)}
			return
		}
		pid := cmd.Process.Pid
		var ws syscall.WaitStatus
		if _, err := syscall.Wait4(pid, &ws, 0, nil); err != nil || !ws.Stopped() {
			cmd.Process.Kill()
			cmd.Wait()
			res <- result{err: fmt.Errorf("start %s: the process did not stop after exec (%v)", s.cfg.Command[0], err)}
			return
		}
		// Trade the ptrace stop for an ordinary SIGSTOP before hooking:
		// were cudatap killed while the program sat in its ptrace stop, the
		// kernel would deliver the exec's SIGTRAP and kill it, and nothing
		// could prevent that; a SIGSTOP the guardian ends (SIGCONT) if
		// cudatap dies. The pending SIGSTOP is taken before the program
		// runs a single instruction.
		s.guard.hold(pid)
		syscall.Kill(pid, syscall.SIGSTOP)
		var attachErr error
		if err := syscall.PtraceDetach(pid); err != nil {
			attachErr = fmt.Errorf("release %d from ptrace: %w", pid, err)
		} else if _, err := syscall.Wait4(pid, &ws, syscall.WUNTRACED, nil); err != nil || !ws.Stopped() {
			attachErr = fmt.Errorf("start %s: the process did not stop for hooking (%v)", s.cfg.Command[0], err)
		}
		if attachErr == nil {
			attachErr = s.attachProcess(pid, true, false)
		}
		syscall.Kill(pid, syscall.SIGCONT)
		if attachErr != nil {
			cmd.Process.Kill()
			cmd.Wait()
			res <- result{err: attachErr}
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
