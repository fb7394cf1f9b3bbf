// Command wheel packs a cudatap release binary into a Python wheel, so that
// `pip install cudatap-VERSION-py3-none-manylinux_2_17_x86_64.whl` puts
// cudatap on PATH, as py-spy's and ruff's wheels do: the binary is the
// wheel's one script (cudatap-VERSION.data/scripts/cudatap), which pip
// installs into the environment's bin directory as it is. No Python code,
// no build backend: a wheel is a zip with METADATA, WHEEL and a RECORD of
// every file's SHA-256 (PEP 427, PEP 491).
//
//	go run ./packaging/wheel -binary dist/cudatap-linux-amd64 -arch amd64 -version "$(git describe --tags --always --dirty)" -license LICENSE -o dist
package main

import (
	"archive/zip"
	"bytes"
	"crypto/sha256"
	"debug/elf"
	"encoding/base64"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

func main() {
	var o options
	flag.StringVar(&o.binary, "binary", "", "the release binary to pack (dist/cudatap-linux-ARCH)")
	flag.StringVar(&o.arch, "arch", "", "its GOARCH: amd64 or arm64")
	flag.StringVar(&o.version, "version", "", "the release, as `git describe --tags --always --dirty` says it (made a PEP 440 version)")
	flag.StringVar(&o.license, "license", "LICENSE", "the license file, packed into the wheel's metadata")
	flag.StringVar(&o.dir, "o", "dist", "directory to write the wheel into")
	flag.Parse()
	if o.binary == "" || o.arch == "" || o.version == "" || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: go run ./packaging/wheel -binary FILE -arch amd64|arm64 -version VERSION [-license LICENSE] [-o DIR]")
		os.Exit(2)
	}
	path, err := build(o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "wheel:", err)
		os.Exit(1)
	}
	fmt.Println(path)
}

type options struct {
	binary, arch, version, license, dir string
}

// platforms: the wheel's platform tag and the ELF machine its binary must
// be, by GOARCH. manylinux_2_17: the release binaries need glibc 2.17 at
// most (packaging/check-glibc.sh checks it).
var platforms = map[string]struct {
	tag     string
	machine elf.Machine
}{
	"amd64": {"manylinux_2_17_x86_64", elf.EM_X86_64},
	"arm64": {"manylinux_2_17_aarch64", elf.EM_AARCH64},
}

// summary and description are METADATA's: what pip show and an index print.
const (
	summary     = "See what CUDA programs really do: eBPF tracing of the CUDA runtime, driver and NCCL in unmodified, running processes"
	description = `cudatap attaches eBPF uprobes to the CUDA runtime, the driver and NCCL inside
unmodified, already running processes, rebuilds what every CUDA stream did,
finds the synchronizations that stall the GPU and names the Python and native
line that caused each.

This wheel holds the cudatap binary for Linux (glibc 2.17 or later) and no
Python code: pip puts ` + "`cudatap`" + ` on PATH. Tracing needs root, or CAP_BPF,
CAP_PERFMON and CAP_SYS_PTRACE: ` + "`sudo $(command -v cudatap) doctor`" + `.
`
)

// build writes the wheel and returns its path.
func build(o options) (string, error) {
	plat, ok := platforms[o.arch]
	if !ok {
		return "", fmt.Errorf("no wheel for GOARCH %q: amd64 or arm64", o.arch)
	}
	version, err := pep440(o.version)
	if err != nil {
		return "", err
	}
	binary, err := os.ReadFile(o.binary)
	if err != nil {
		return "", err
	}
	if err := checkMachine(binary, plat.machine); err != nil {
		return "", fmt.Errorf("%s: %w", o.binary, err)
	}
	license, err := os.ReadFile(o.license)
	if err != nil {
		return "", fmt.Errorf("%w (the wheel carries the license)", err)
	}
	path := filepath.Join(o.dir, fmt.Sprintf("cudatap-%s-py3-none-%s.whl", version, plat.tag))
	data, err := wheel(version, plat.tag, binary, license)
	if err != nil {
		return "", err
	}
	return path, os.WriteFile(path, data, 0o644)
}

// checkMachine: a binary packed under the wrong platform tag would install
// and then fail with "cannot execute binary file".
func checkMachine(binary []byte, want elf.Machine) error {
	f, err := elf.NewFile(bytes.NewReader(binary))
	if err != nil {
		return fmt.Errorf("not an ELF executable: %w", err)
	}
	if f.Machine != want {
		return fmt.Errorf("is built for %v, not %v", f.Machine, want)
	}
	return nil
}

// wheel is the zip: the script, then the metadata, RECORD last. Every
// entry has the same time, so the same binary makes the same wheel.
func wheel(version, platform string, binary, license []byte) ([]byte, error) {
	info := "cudatap-" + version + ".dist-info/"
	files := []struct {
		name string
		mode os.FileMode
		data []byte
	}{
		{"cudatap-" + version + ".data/scripts/cudatap", 0o755, binary},
		{info + "METADATA", 0o644, []byte(metadata(version))},
		{info + "WHEEL", 0o644, []byte("Wheel-Version: 1.0\nGenerator: cudatap packaging/wheel\nRoot-Is-Purelib: false\nTag: py3-none-" + platform + "\n")},
		{info + "LICENSE", 0o644, license},
	}
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	var record strings.Builder
	add := func(name string, mode os.FileMode, data []byte) error {
		h := &zip.FileHeader{Name: name, Method: zip.Deflate, Modified: time.Date(1980, 1, 1, 0, 0, 0, 0, time.UTC)}
		h.SetMode(mode)
		w, err := zw.CreateHeader(h)
		if err != nil {
			return err
		}
		_, err = w.Write(data)
		return err
	}
	for _, f := range files {
		if err := add(f.name, f.mode, f.data); err != nil {
			return nil, err
		}
		sum := sha256.Sum256(f.data)
		fmt.Fprintf(&record, "%s,sha256=%s,%d\n", f.name, base64.RawURLEncoding.EncodeToString(sum[:]), len(f.data))
	}
	record.WriteString(info + "RECORD,,\n")
	if err := add(info+"RECORD", 0o644, []byte(record.String())); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func metadata(version string) string {
	return "Metadata-Version: 2.1\n" +
		"Name: cudatap\n" +
		"Version: " + version + "\n" +
		"Summary: " + summary + "\n" +
		"Home-page: https://github.com/cudatap/cudatap\n" +
		"License: Apache-2.0\n" +
		"Classifier: License :: OSI Approved :: Apache Software License\n" +
		"Classifier: Operating System :: POSIX :: Linux\n" +
		"Classifier: Environment :: GPU :: NVIDIA CUDA\n" +
		"Classifier: Topic :: Software Development :: Debuggers\n" +
		"Requires-Python: >=3.7\n" +
		"Description-Content-Type: text/markdown\n" +
		"\n" + description
}

var (
	describeTag  = regexp.MustCompile(`^v?([0-9]+(?:\.[0-9]+)*)(?:-?(alpha|beta|rc|a|b)\.?([0-9]+))?(?:-([0-9]+)-g([0-9a-f]+))?(-dirty)?$`)
	describeHash = regexp.MustCompile(`^([0-9a-f]{7,40})(-dirty)?$`)
	preRelease   = map[string]string{"alpha": "a", "a": "a", "beta": "b", "b": "b", "rc": "rc"}
)

// pep440 makes a PEP 440 version of what `git describe --tags --always
// --dirty` prints, which pip needs in the wheel's name and metadata:
//
//	v1.2.3                 1.2.3
//	v1.2.3-rc.1            1.2.3rc1
//	v1.2.3-4-gabc1234      1.2.3.post4+gabc1234 (4 commits after the tag)
//	abc1234-dirty          0.0.0+gabc1234.dirty (no tag yet)
//	dev                    0.0.0+dev (not built from a git checkout)
func pep440(describe string) (string, error) {
	if describe == "dev" {
		return "0.0.0+dev", nil
	}
	var local []string
	if m := describeHash.FindStringSubmatch(describe); m != nil && !strings.Contains(describe, ".") {
		local = append(local, "g"+m[1])
		if m[2] != "" {
			local = append(local, "dirty")
		}
		return "0.0.0+" + strings.Join(local, "."), nil
	}
	m := describeTag.FindStringSubmatch(describe)
	if m == nil {
		return "", fmt.Errorf("version %q is not what git describe --tags --always --dirty prints for a tag like v1.2.3: tag releases vMAJOR.MINOR.PATCH", describe)
	}
	v := m[1]
	if m[2] != "" {
		v += preRelease[m[2]] + m[3]
	}
	if m[4] != "" {
		v += ".post" + m[4]
		local = append(local, "g"+m[5])
	}
	if m[6] != "" {
		local = append(local, "dirty")
	}
	if len(local) > 0 {
		v += "+" + strings.Join(local, ".")
	}
	return v, nil
}
