package gputime

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

const nobody = 65534

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: cudatap stages the collector as root")
	}
}

// asNobody runs a command as the unprivileged user nobody: the target's
// user, who plants things in its /tmp.
func asNobody(t *testing.T, args ...string) {
	t.Helper()
	cmd := exec.Command(args[0], args[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("as nobody: %v: %v\n%s", args, err, out)
	}
}

// victim is a root-only directory (0700) holding a root-only file (0600):
// what the review's attacker pointed its links at.
type victim struct {
	dir, file string
}

const victimContent = "root's secret\n"

func newVictim(t *testing.T) victim {
	t.Helper()
	dir, err := os.MkdirTemp("", "cudatap-victim-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	v := victim{dir: dir, file: filepath.Join(dir, "config.txt")}
	if err := os.WriteFile(v.file, []byte(victimContent), 0o600); err != nil {
		t.Fatal(err)
	}
	return v
}

// untouched fails the test if anything about the victim changed.
func (v victim) untouched(t *testing.T) {
	t.Helper()
	for _, p := range []string{v.dir, v.file} {
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil {
			t.Fatal(err)
		}
		if st.Uid != 0 || st.Gid != 0 {
			t.Errorf("%s now owned by %d:%d, want root", p, st.Uid, st.Gid)
		}
	}
	if fi, _ := os.Stat(v.dir); fi.Mode().Perm() != 0o700 {
		t.Errorf("%s mode %o, want 0700", v.dir, fi.Mode().Perm())
	}
	if fi, _ := os.Stat(v.file); fi.Mode().Perm() != 0o600 {
		t.Errorf("%s mode %o, want 0600", v.file, fi.Mode().Perm())
	}
	if b, _ := os.ReadFile(v.file); string(b) != victimContent {
		t.Errorf("%s overwritten: %q", v.file, b)
	}
	ents, _ := os.ReadDir(v.dir)
	if len(ents) != 1 {
		t.Errorf("%s holds %d entries, want only config.txt", v.dir, len(ents))
	}
}

// The review's attacks (5e, 5f), planted by nobody where cudatap makes the
// collector's directory: a link to a root directory, or a directory of
// links to root files. cudatap refuses, says why, and touches nothing.
func TestStagingRefusesPlanted(t *testing.T) {
	needRoot(t)
	for _, tc := range []struct {
		name  string
		plant func(t *testing.T, at string, v victim)
	}{
		{"directory is a link", func(t *testing.T, at string, v victim) {
			asNobody(t, "ln", "-s", v.dir, at)
		}},
		{"links in a directory", func(t *testing.T, at string, v victim) {
			asNobody(t, "mkdir", at)
			asNobody(t, "ln", "-s", v.file, filepath.Join(at, "config"))
			asNobody(t, "ln", "-s", v.file, filepath.Join(at, libraryFile))
			asNobody(t, "ln", "-s", v.file, filepath.Join(at, socketFile))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := newVictim(t)
			name, err := newStagingName()
			if err != nil {
				t.Fatal(err)
			}
			at := filepath.Join("/tmp", name)
			t.Cleanup(func() { os.RemoveAll(at) })
			tc.plant(t, at, v)
			_, err = Listen(Config{Root: "/", UID: nobody, GID: nobody, name: name}, newRecorder())
			if !errors.Is(err, ErrPlanted) || !strings.Contains(err.Error(), at) {
				t.Fatalf("Listen over a planted %s: %v, want ErrPlanted naming it", at, err)
			}
			t.Log(err)
			v.untouched(t)
			var st syscall.Stat_t
			if err := syscall.Lstat(at, &st); err != nil || st.Uid != nobody {
				t.Errorf("the planted %s: %v, owner %d; want it left as nobody made it", at, err, st.Uid)
			}
		})
	}
}

// A /tmp without the sticky bit (a container's emptyDir) lets its users
// rename what root made: a directory swapped for a link, or for one of
// theirs, between cudatap's mkdir and its open, is refused.
func TestStagingRefusesSwapped(t *testing.T) {
	needRoot(t)
	for _, tc := range []struct {
		name string
		swap func(t *testing.T, at string, v victim)
	}{
		{"swapped for a link", func(t *testing.T, at string, v victim) {
			if err := os.Symlink(v.dir, at); err != nil {
				t.Fatal(err)
			}
		}},
		{"swapped for nobody's directory", func(t *testing.T, at string, v victim) {
			asNobody(t, "mkdir", "-m", "0700", at)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := newVictim(t)
			root := t.TempDir()
			os.Chmod(root, 0o755) // nobody must reach its tmp
			os.Chmod(filepath.Dir(root), 0o755)
			tmp := filepath.Join(root, "tmp")
			if err := os.Mkdir(tmp, 0o777); err != nil { // world-writable, no sticky bit
				t.Fatal(err)
			}
			os.Chmod(tmp, 0o777)
			name, _ := newStagingName()
			at := filepath.Join(tmp, name)
			cfg := Config{Root: root, UID: nobody, GID: nobody, name: name}
			cfg.afterMkdir = func() {
				if err := os.Rename(at, at+".moved"); err != nil {
					t.Fatal(err)
				}
				tc.swap(t, at, v)
			}
			_, err := Listen(cfg, newRecorder())
			if !errors.Is(err, ErrPlanted) {
				t.Fatalf("Listen with the directory swapped: %v, want ErrPlanted", err)
			}
			t.Log(err)
			v.untouched(t)
			if fi, err := os.Lstat(at); err == nil && fi.IsDir() {
				if ents, _ := os.ReadDir(at); len(ents) != 0 {
					t.Errorf("wrote %d entries into the swapped-in directory", len(ents))
				}
			}
		})
	}
}

// A container's /tmp that is an absolute link resolves inside the
// container, never on the host.
func TestStagingInContainerRoot(t *testing.T) {
	needRoot(t)
	// A host directory the container's link names (not under /tmp, which
	// the container's root has too).
	host, err := os.MkdirTemp("/var/tmp", "cudatap-host-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(host) })
	root := t.TempDir() // the container's root
	inside := filepath.Join(root, host)
	if err := os.MkdirAll(inside, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(host, filepath.Join(root, "tmp")); err != nil {
		t.Fatal(err)
	}
	l, err := Listen(Config{Root: root, UID: nobody, GID: nobody}, newRecorder())
	if err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(host); len(ents) != 0 {
		t.Errorf("the host's %s holds %d entries: the container's link was followed on the host", host, len(ents))
	}
	dir := filepath.Join(inside, l.Dir())
	checkStaged(t, dir)
	if want := filepath.Join("/tmp", l.Dir(), libraryFile); l.LibraryPath() != want {
		t.Errorf("LibraryPath() = %s, want %s (as the target sees it)", l.LibraryPath(), want)
	}
	l.Stop(time.Second)
	if _, err := os.Lstat(dir); !os.IsNotExist(err) {
		t.Errorf("after Stop, %s: %v; want it removed", dir, err)
	}
}

// checkStaged: the directory is root's (0711), the files root's, and only
// the socket the target's (nobody's, 0600).
func checkStaged(t *testing.T, dir string) {
	t.Helper()
	for _, c := range []struct {
		name string
		uid  uint32
		mode os.FileMode
	}{
		{"", 0, 0o711}, {libraryFile, 0, 0o755}, {configFile, 0, 0o644}, {socketFile, nobody, 0o600},
	} {
		p := filepath.Join(dir, c.name)
		fi, err := os.Lstat(p)
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		if st.Uid != c.uid || fi.Mode().Perm() != c.mode {
			t.Errorf("%s: owner %d mode %o, want %d %o", p, st.Uid, fi.Mode().Perm(), c.uid, c.mode)
		}
	}
}

// The guardian's cleanup removes cudatap's directory, and nothing that is
// not one of its own.
func TestRemoveStaging(t *testing.T) {
	needRoot(t)
	l, err := Listen(Config{Root: "/", UID: -1, GID: -1}, newRecorder())
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join("/tmp", l.Dir())
	// As if cudatap died: the listener is never stopped.
	if err := RemoveStaging("/", l.Dir()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(dir); !os.IsNotExist(err) {
		t.Errorf("%s: %v, want it removed", dir, err)
	}
	v := newVictim(t)
	name, _ := newStagingName()
	link := filepath.Join("/tmp", name)
	asNobody(t, "ln", "-s", v.dir, link)
	defer os.Remove(link)
	if err := RemoveStaging("/", name); err == nil {
		t.Error("RemoveStaging followed a link")
	}
	v.untouched(t)
	if err := RemoveStaging("/", "../etc"); err == nil {
		t.Error("RemoveStaging took a name that is not a collector directory's")
	}
	l.Stop(0)
}
