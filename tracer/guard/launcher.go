package guard

import (
	"fmt"
	"os"
	"runtime"
	"syscall"
)

// LauncherEnv marks this binary re-executed as the launcher of a command
// (its value is the command's path): the session starts a command through
// it (tracer's launch).
const LauncherEnv = "CUDATAP_LAUNCH_EXEC"

// The launcher must exec on the process's first thread: cudatap seizes
// that thread (PTRACE_SEIZE on the pid) to stop the command at its exec,
// and an exec from another thread of this many-threaded Go process reaches
// cudatap as the launcher's exit, the command running untraced ("it ended
// before running (<nil>, 0)": seen once in a make test on the loaded 2-core
// VM; a test program whose main goroutine allocated before its exec did it
// in 2 of 20 runs). Init functions run on the first thread, and one that
// locks it there keeps main, and so Init and launchExec, on it. Only in a
// launcher: any other process is left as it is.
func init() {
	if os.Getenv(LauncherEnv) != "" {
		runtime.LockOSThread()
	}
}

// launchExec runs the launcher when this binary was re-executed as one: it
// waits for cudatap's go-ahead on descriptor 3 (a byte, or the end of the
// pipe if cudatap died: then it goes ahead untraced), then becomes the
// command, with the environment it was given minus its own marker.
func launchExec() {
	path := os.Getenv(LauncherEnv)
	if path == "" {
		return
	}
	os.Unsetenv(LauncherEnv)
	var b [1]byte
	syscall.Read(3, b[:])
	syscall.Close(3)
	err := syscall.Exec(path, os.Args, os.Environ())
	fmt.Fprintf(os.Stderr, "cudatap: run %s: %v\n", path, err)
	os.Exit(127)
}
