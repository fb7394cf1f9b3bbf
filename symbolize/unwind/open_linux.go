package unwind

import (
	"errors"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// openFile opens path read-only. Like the symbolize package, it resolves
// /proc/PID/root/REST (see [symbolize.Mapping.OpenPath]) with
// openat2(RESOLVE_IN_ROOT) inside the target's root, so that a symlink
// planted in a container cannot point us at a host file.
func openFile(path string) (*os.File, error) {
	root, rel, ok := splitProcRoot(path)
	if !ok {
		return os.Open(path)
	}
	dirfd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: root, Err: err}
	}
	defer unix.Close(dirfd)
	fd, err := unix.Openat2(dirfd, rel, &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS,
	})
	if errors.Is(err, unix.ENOSYS) {
		return os.Open(path) // kernels before 5.6
	}
	if err != nil {
		return nil, &os.PathError{Op: "openat2", Path: path, Err: err}
	}
	return os.NewFile(uintptr(fd), path), nil
}

// splitProcRoot splits "/proc/PID/root/REST" into "/proc/PID/root" and
// "REST"; PID may be "self".
func splitProcRoot(path string) (root, rel string, ok bool) {
	rest, ok := strings.CutPrefix(path, "/proc/")
	if !ok {
		return "", "", false
	}
	i := strings.IndexByte(rest, '/')
	if i <= 0 {
		return "", "", false
	}
	pid := rest[:i]
	if pid != "self" && strings.Trim(pid, "0123456789") != "" {
		return "", "", false
	}
	rel, ok = strings.CutPrefix(rest[i:], "/root/")
	if !ok || rel == "" {
		return "", "", false
	}
	return path[:len("/proc/")+i+len("/root")], rel, true
}
