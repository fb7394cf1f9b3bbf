package tracer

import (
	"bufio"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"testing"
)

// waiter is a test program that prints "ready" once CUDA is loaded, waits
// for a line on stdin, does its work and prints its result: the simulated
// flood, the launch loop.
type waiter struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Reader
}

// startWaiter starts the program and waits for its "ready" line.
func startWaiter(tb testing.TB, name string, args ...string) *waiter {
	tb.Helper()
	return startWaiterLine(tb, "ready", name, args...)
}

// startWaiterLine starts the program and waits for a line that starts
// with first.
func startWaiterLine(tb testing.TB, first, name string, args ...string) *waiter {
	tb.Helper()
	return startWaiterCmd(tb, first, exec.Command(name, args...))
}

// startWaiterCmd starts cmd (set up but not started) and waits for a line
// that starts with first.
func startWaiterCmd(tb testing.TB, first string, cmd *exec.Cmd) *waiter {
	tb.Helper()
	stdin, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	w := &waiter{cmd: cmd, stdin: stdin, out: bufio.NewReader(stdout)}
	if line := w.line(tb); !strings.HasPrefix(line, first) {
		tb.Fatalf("%s printed %q, want %s", cmd.Path, line, first)
	}
	return w
}

func (w *waiter) pid() int { return w.cmd.Process.Pid }

func (w *waiter) line(tb testing.TB) string {
	s, err := w.out.ReadString('\n')
	if err != nil {
		tb.Fatalf("%s: %v", w.cmd.Path, err)
	}
	return strings.TrimSpace(s)
}

// start lets the program do its work.
func (w *waiter) start() { fmt.Fprintln(w.stdin, "go") }

// result closes stdin (ending an endless program), reads the result line
// and waits for the program to exit.
func (w *waiter) result(tb testing.TB) string {
	tb.Helper()
	w.stdin.Close()
	s := w.line(tb)
	w.cmd.Wait()
	return s
}
