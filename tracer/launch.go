package tracer

import (
	"errors"
	"fmt"
	"os/exec"
	"runtime"
	"syscall"
	"time"
)

// launched is a command cudatap started itself.
type launched struct {
	pid  int
	cmd  *exec.Cmd
	done chan struct{}
	code int
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
		attachErr := s.attachProcess(pid, true, false)
		if err := syscall.PtraceDetach(pid); err != nil {
			attachErr = errors.Join(attachErr, fmt.Errorf("release %d from ptrace: %w", pid, err))
		}
		if attachErr != nil {
			cmd.Process.Kill()
			cmd.Wait()
			res <- result{err: attachErr}
			return
		}
		l := &launched{pid: pid, cmd: cmd, done: make(chan struct{}), code: -1}
		go func() {
			err := cmd.Wait()
			l.code = exitCode(cmd, err)
			close(l.done)
		}()
		res <- result{l: l}
	}()
	r := <-res
	return r.l, r.err
}

func exitCode(cmd *exec.Cmd, err error) int {
	if cmd.ProcessState == nil {
		return -1
	}
	if err != nil && cmd.ProcessState.ExitCode() < 0 {
		return -1
	}
	return cmd.ProcessState.ExitCode()
}

// stop ends the command if it still runs (SIGTERM, then SIGKILL after 5 s)
// and returns its exit code.
func (l *launched) stop() int {
	select {
	case <-l.done:
		return l.code
	default:
	}
	l.cmd.Process.Signal(syscall.SIGTERM)
	// A process stopped by the linker hook must be continued to die.
	l.cmd.Process.Signal(syscall.SIGCONT)
	select {
	case <-l.done:
	case <-time.After(5 * time.Second):
		l.cmd.Process.Kill()
		<-l.done
	}
	return l.code
}
