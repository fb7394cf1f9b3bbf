package guard

import (
	"fmt"
	"os"
	"syscall"
)

// LauncherEnv marks this binary re-executed as the launcher of a command
// (its value is the command's path): the session starts a command through
// it (tracer's launch).
const LauncherEnv = "CUDATAP_LAUNCH_EXEC"

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
