package objfile

import (
	"errors"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// OpenFile opens path read-only. A path of the form /proc/PID/root/REST
// (see [Mapping.OpenPath]) is resolved with openat2(RESOLVE_IN_ROOT) inside
// the target's root: a plain open would follow an absolute symlink planted in
// the container relative to the host's root, and let the container point us
// at any host file.
func OpenFile(path string) (*os.File, error) {
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
		// Kernels before 5.6 have no openat2; the best we can do there is a
		// plain open.
		return os.Open(path)
	}
	if err != nil {
		return nil, &os.PathError{Op: "openat2", Path: path, Err: err}
	}
	return os.NewFile(uintptr(fd), path), nil
}

// statKeyOf identifies the contents of an open file without reading it.
func statKeyOf(fi os.FileInfo) statKey {
	k := statKey{size: fi.Size(), mtime: fi.ModTime().UnixNano()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		k.dev, k.inode = uint64(st.Dev), st.Ino
	}
	return k
}
