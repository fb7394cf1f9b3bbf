package gputime

// The collector's directory. cudatap runs as root and writes into a
// target's /tmp (a container's, through /proc/PID/root), a directory the
// target's user can write to: every step must assume that user has planted
// links or directories to turn root's writes against the node. So nothing
// is ever done by a path that user controls:
//
//   - the target's root is opened once, and its /tmp resolved with
//     openat2(RESOLVE_IN_ROOT|RESOLVE_NO_MAGICLINKS): a container's links
//     resolve inside the container, never on the host;
//   - the directory has an unpredictable name, is made with mkdirat (which
//     follows no link) and opened O_NOFOLLOW, and is checked to be the one
//     root just made: root's, mode 0711, empty. Anything else is refused;
//   - files are created in it O_CREAT|O_EXCL|O_NOFOLLOW through its
//     descriptor; the socket is bound through /proc/self/fd, and owned and
//     chmodded relative to the descriptor. The directory stays root's: the
//     target's user can read the library and reach the socket, no more;
//   - removal unlinks entries through the same descriptors.

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"path"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/cudatap/cudatap/tracer/gputime/collector"
)

// stagingPrefix starts every collector directory's name.
const stagingPrefix = "cudatap-gputimes-"

// ErrPlanted: the target's /tmp held something where cudatap was to make
// its directory, or the directory was swapped: nothing was written.
var ErrPlanted = errors.New("the collector's directory was tampered with")

// staging is the collector's directory in a target's /tmp, held open.
type staging struct {
	tmp, dir int    // the target's /tmp (O_PATH) and the directory
	name     string // the directory's name in tmp
	target   string // the directory as the target sees it
}

// newStagingName draws an unpredictable directory name.
func newStagingName() (string, error) {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return stagingPrefix + hex.EncodeToString(b[:]), nil
}

// makeStaging makes the directory name in the /tmp of the file system
// whose root cudatap reaches at root ("/", or /proc/PID/root for a process
// in a container).
// afterMkdir, if set, runs between the mkdir and the open (tests: an
// attacker's move).
func makeStaging(root, name string, afterMkdir func()) (*staging, error) {
	if name == "" || path.Base(name) != name || name == "." || name == ".." {
		return nil, fmt.Errorf("GPU times: bad directory name %q", name)
	}
	tmp, err := openTmp(root)
	if err != nil {
		return nil, err
	}
	shown := path.Join("/tmp", name)
	if err := unix.Mkdirat(tmp, name, 0o700); err != nil {
		unix.Close(tmp)
		if errors.Is(err, unix.EEXIST) {
			return nil, fmt.Errorf("GPU times: %s already exists in the target's file system, made by someone else: %w; "+
				"nothing was written (remove it, and look at who made it)", shown, ErrPlanted)
		}
		return nil, fmt.Errorf("GPU times: make %s in the target's file system: %w", shown, err)
	}
	s := &staging{tmp: tmp, dir: -1, name: name, target: shown}
	if afterMkdir != nil {
		afterMkdir()
	}
	dir, err := unix.Openat(tmp, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		s.close()
		return nil, fmt.Errorf("GPU times: open %s, just made: %v: %w; nothing was written", shown, err, ErrPlanted)
	}
	s.dir = dir
	// Between mkdirat and open, a /tmp without the sticky bit (a
	// container's emptyDir) lets its users rename entries: the directory
	// must be the one made above.
	var st unix.Stat_t
	if err := unix.Fstat(dir, &st); err != nil {
		s.close()
		return nil, fmt.Errorf("GPU times: stat %s: %w", shown, err)
	}
	if st.Uid != uint32(unix.Geteuid()) || st.Mode&0o7777 != 0o700 {
		s.close()
		return nil, fmt.Errorf("GPU times: %s was replaced after cudatap made it (owner %d, mode %o): %w; nothing was written",
			shown, st.Uid, st.Mode&0o7777, ErrPlanted)
	}
	if err := unix.Fchmod(dir, 0o711); err != nil { // the target may reach what it is told of, and list nothing
		s.remove()
		return nil, fmt.Errorf("GPU times: chmod %s: %w", shown, err)
	}
	return s, nil
}

// openTmp opens root's /tmp (O_PATH), resolving links inside root only.
func openTmp(root string) (int, error) {
	rfd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("GPU times: open the target's root %s: %w", root, err)
	}
	defer unix.Close(rfd)
	tmp, err := unix.Openat2(rfd, "tmp", &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS,
	})
	if errors.Is(err, unix.ENOSYS) {
		return -1, fmt.Errorf("GPU times: this kernel has no openat2 (Linux 5.6), which cudatap needs to write into a target's /tmp safely")
	}
	if err != nil {
		return -1, fmt.Errorf("GPU times: open the target's /tmp (under %s): %w", root, err)
	}
	return tmp, nil
}

// writeFile creates name in the directory (it must not exist) with data.
func (s *staging) writeFile(name string, data []byte, mode uint32) error {
	fd, err := unix.Openat(s.dir, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, mode)
	if err != nil {
		return fmt.Errorf("GPU times: create %s: %w", path.Join(s.target, name), err)
	}
	defer unix.Close(fd)
	if err := unix.Fchmod(fd, mode); err != nil { // whatever the umask
		return fmt.Errorf("GPU times: chmod %s: %w", path.Join(s.target, name), err)
	}
	for b := data; len(b) > 0; {
		n, err := unix.Write(fd, b)
		if err != nil {
			return fmt.Errorf("GPU times: write %s: %w", path.Join(s.target, name), err)
		}
		b = b[n:]
	}
	return nil
}

// listen binds a SOCK_SEQPACKET socket at name in the directory, mode 0600,
// owned by uid:gid (-1: cudatap's) so that the target can connect.
func (s *staging) listen(name string, uid, gid int) (*net.UnixListener, error) {
	// bind takes a path: the directory's own, through our descriptor. It
	// is root's and no one else can add or swap entries in it.
	p := "/proc/self/fd/" + strconv.Itoa(s.dir) + "/" + name
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: p, Net: "unixpacket"})
	if err != nil {
		return nil, fmt.Errorf("GPU times: listen on %s: %w", path.Join(s.target, name), err)
	}
	// Unlinked by remove, through the descriptor, not by this path.
	ln.SetUnlinkOnClose(false)
	err = unix.Fchmodat(s.dir, name, 0o600, 0)
	if err == nil && uid >= 0 && gid >= 0 {
		err = unix.Fchownat(s.dir, name, uid, gid, unix.AT_SYMLINK_NOFOLLOW)
	}
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("GPU times: give %s to the target's user: %w", path.Join(s.target, name), err)
	}
	return ln, nil
}

// remove deletes the directory and what cudatap put in it.
func (s *staging) remove() {
	if s.dir >= 0 {
		removeEntries(s.dir)
		unix.Unlinkat(s.tmp, s.name, unix.AT_REMOVEDIR)
	}
	s.close()
}

func (s *staging) close() {
	if s.dir >= 0 {
		unix.Close(s.dir)
		s.dir = -1
	}
	if s.tmp >= 0 {
		unix.Close(s.tmp)
		s.tmp = -1
	}
}

// stagedFiles are the only entries cudatap makes in its directory.
var stagedFiles = []string{libraryFile, configFile, socketFile, nvtxSocketFile}

const (
	libraryFile = collector.LibraryName
	configFile  = "config"
	socketFile  = "sock"
)

// removeEntries unlinks cudatap's entries from the directory dir.
func removeEntries(dir int) {
	for _, f := range stagedFiles {
		unix.Unlinkat(dir, f, 0)
	}
}

// RemoveStaging removes the collector directory name from the /tmp under
// root, as Stop would have: for the guardian, when cudatap died without
// cleaning up. Only a directory of cudatap's own (its name, owned by
// root, not a link) is touched, through descriptors.
func RemoveStaging(root, name string) error {
	if len(name) <= len(stagingPrefix) || name[:len(stagingPrefix)] != stagingPrefix || path.Base(name) != name {
		return fmt.Errorf("not a collector directory: %q", name)
	}
	tmp, err := openTmp(root)
	if err != nil {
		return err
	}
	defer unix.Close(tmp)
	dir, err := unix.Openat(tmp, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(dir)
	var st unix.Stat_t
	if err := unix.Fstat(dir, &st); err != nil {
		return err
	}
	if st.Uid != uint32(unix.Geteuid()) {
		return fmt.Errorf("/tmp/%s is not cudatap's (owner %d): left alone", name, st.Uid)
	}
	removeEntries(dir)
	return unix.Unlinkat(tmp, name, unix.AT_REMOVEDIR)
}
