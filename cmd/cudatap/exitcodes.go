package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"

	"github.com/cudatap/cudatap/internal/procfs"
	"github.com/cudatap/cudatap/tracer/probe"
)

// cudatap's exit statuses (docs/cli.md, "Exit codes"; `cudatap --help`). A
// command launched after `record --` gives record its own status when
// cudatap itself succeeded (exitError).
const (
	exitFailure    = 1 // anything not below
	exitUsage      = 2 // a bad command, flag, argument or output name
	exitPermission = 3 // not allowed to trace: no root, no CAP_BPF/CAP_PERFMON/CAP_SYS_PTRACE
	exitNotFound   = 4 // no such process, command to launch, or recording
	exitNoCUDA     = 5 // the target process maps no CUDA runtime, driver or NCCL
	exitPartial    = 6 // outputs written, but not all of them, or from a recording that was cut
	exitLint       = 7 // lint --fail-on LEVEL: a finding at that level or a more severe one fired
	// A command that reads recordings (export, report, lint, syncs,
	// merge) stopped by SIGINT, SIGTERM or SIGHUP before it finished:
	// 128 + SIGINT, as shells report it.
	exitInterrupted = 130
)

const exitCodesHelp = `Exit status: 0 ok; 1 any other failure; 2 usage (bad command, flag, argument or
output name); 3 not permitted (not root, no CAP_BPF/CAP_PERFMON/CAP_SYS_PTRACE);
4 target not found (no such process, command or recording); 5 no CUDA in the
target process; 6 partial output (an output could not be written, or the recording
was cut: what was written is valid); 7 lint --fail-on LEVEL: a finding at that
level or a more severe one fired; 130 interrupted: export, report, lint, syncs
or merge stopped by a signal before it finished (no half-written output). record
with a command after --: the command's own status, unless cudatap itself failed.`

// exitError ends cudatap with a status and prints nothing more: the traced
// command's, or one already explained on stderr.
type exitError struct{ code int }

func (e *exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// codedError is an error, printed as it is, that ends cudatap with code.
type codedError struct {
	code int
	err  error
}

func (e *codedError) Error() string { return e.err.Error() }
func (e *codedError) Unwrap() error { return e.err }

func withCode(code int, err error) error {
	if err == nil {
		return nil
	}
	return &codedError{code: code, err: err}
}

// usageError: how cudatap was called is wrong.
func usageError(err error) error { return withCode(exitUsage, err) }

// partialError: the outputs were written from what was traced, but one
// failed or the recording was cut.
func partialError(err error) error { return withCode(exitPartial, err) }

// exitCode is the status err ends cudatap with: a code given where the
// error arose, else its class from the sentinel errors it wraps.
func exitCode(err error) int {
	var ce *codedError
	var ee *exitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ce):
		return ce.code
	case errors.As(err, &ee):
		return ee.code
	case errors.Is(err, probe.ErrPrivileges):
		return exitPermission
	case errors.Is(err, probe.ErrNoProcess):
		return exitNotFound
	case errors.Is(err, probe.ErrNoCUDA):
		return exitNoCUDA
	}
	return exitFailure
}

// reportError prints err once, on stderr (nothing for an exitError), and
// returns the status to exit with.
func reportError(err error) int {
	var ee *exitError
	if err != nil && !errors.As(err, &ee) {
		fmt.Fprintln(os.Stderr, "cudatap:", err)
	}
	return exitCode(err)
}

// checkTargets finds what a tracing command was asked to trace before it
// loads anything, so that a typo exits with "not found" (4): every PID must
// be a live process, and a command to launch must be found on PATH.
func checkTargets(pids []int, command []string) error {
	for _, pid := range pids {
		if pid <= 0 || !procfs.Alive(pid) {
			return withCode(exitNotFound, fmt.Errorf("process %d does not exist: check the PID (ps -ef | grep ...)", pid))
		}
	}
	if len(command) > 0 {
		if _, err := exec.LookPath(command[0]); err != nil {
			if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
				return withCode(exitNotFound, fmt.Errorf("command %q not found: %w", command[0], errors.Unwrap(err)))
			}
		}
	}
	return nil
}

// openRecording opens a .cudatap file for a command that replays it
// (what, in its messages): a directory, a FIFO or a missing file each get
// an error that says what to do, before anything could block. When ctx
// ends (a signal), the file is closed: the replay stops at its next read
// and the command's error goes through interrupted.
func openRecording(ctx context.Context, in, what string) (*os.File, error) {
	// Before opening: opening a FIFO would block until a writer comes.
	if fi, err := os.Stat(in); err == nil && fi.IsDir() {
		return nil, fmt.Errorf("%s is a directory: give the .cudatap recording inside it", in)
	} else if err == nil && !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file: %s reads a .cudatap recording more than once (names, then events); copy it to a file first", in, what)
	}
	f, err := os.Open(in)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, withCode(exitNotFound, fmt.Errorf("open recording: %w", err))
	} else if err != nil {
		return nil, fmt.Errorf("open recording: %w", err)
	}
	if ctx.Err() != nil {
		f.Close() // at once: AfterFunc's goroutine could come after the reads
	}
	context.AfterFunc(ctx, func() { f.Close() })
	return f, nil
}

// interrupted is err, or, when a signal ended ctx, an error that says the
// command what stopped and that its unfinished outputs were not written
// (they are removed as after any failed replay), with exitInterrupted.
func interrupted(ctx context.Context, what string, err error) error {
	if err == nil || ctx.Err() == nil {
		return err
	}
	return withCode(exitInterrupted, fmt.Errorf("%s interrupted by a signal before it finished: the outputs it had not finished were not written; run it again to write them", what))
}
