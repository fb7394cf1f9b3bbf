package main

import (
	"archive/zip"
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

func TestPEP440(t *testing.T) {
	for _, c := range []struct{ describe, want string }{
		{"v1.2.3", "1.2.3"},
		{"1.2.3", "1.2.3"},
		{"v0.1", "0.1"},
		{"v1.2.3-rc.1", "1.2.3rc1"},
		{"v1.2.3-beta2", "1.2.3b2"},
		{"v1.2.3-4-gabc1234", "1.2.3.post4+gabc1234"},
		{"v1.2.3-4-gabc1234-dirty", "1.2.3.post4+gabc1234.dirty"},
		{"v1.2.3-dirty", "1.2.3+dirty"},
		{"v1.2.3-rc1-2-g0123abc", "1.2.3rc1.post2+g0123abc"},
		{"d6664f7", "0.0.0+gd6664f7"},
		{"d6664f7-dirty", "0.0.0+gd6664f7.dirty"},
		{"dev", "0.0.0+dev"},
	} {
		got, err := pep440(c.describe)
		if err != nil || got != c.want {
			t.Errorf("pep440(%q) = %q, %v; want %q", c.describe, got, err, c.want)
		}
	}
	for _, bad := range []string{"", "release-1", "v1.2.3-foo", "v1..2", "main"} {
		if got, err := pep440(bad); err == nil {
			t.Errorf("pep440(%q) = %q, want an error", bad, got)
		}
	}
}

// TestWheel packs this test binary (an ELF for GOARCH) and reads the wheel
// back as pip does: every file listed in RECORD with its hash and size,
// RECORD last, the script executable, the tags in the name and in WHEEL.
func TestWheel(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := platforms[runtime.GOARCH]; !ok {
		t.Skipf("no wheel for %s", runtime.GOARCH)
	}
	dir := t.TempDir()
	license := filepath.Join(dir, "LICENSE")
	if err := os.WriteFile(license, []byte("Apache License\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	path, err := build(options{binary: exe, arch: runtime.GOARCH, version: "v1.2.3-4-gabc1234", license: license, dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("cudatap-1.2.3.post4+gabc1234-py3-none-%s.whl", platforms[runtime.GOARCH].tag)
	if filepath.Base(path) != want {
		t.Fatalf("wheel %s, want %s", filepath.Base(path), want)
	}
	zr, err := zip.OpenReader(path)
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	files := map[string][]byte{}
	for _, f := range zr.File {
		rc, err := f.Open()
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			t.Fatal(err)
		}
		files[f.Name] = data
		if f.Name == "cudatap-1.2.3.post4+gabc1234.data/scripts/cudatap" && f.Mode().Perm() != 0o755 {
			t.Errorf("script mode %v, want rwxr-xr-x", f.Mode())
		}
	}
	const info = "cudatap-1.2.3.post4+gabc1234.dist-info/"
	if last := zr.File[len(zr.File)-1].Name; last != info+"RECORD" {
		t.Errorf("last entry %s, want the RECORD", last)
	}
	self, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(files["cudatap-1.2.3.post4+gabc1234.data/scripts/cudatap"], self) {
		t.Error("the script is not the binary")
	}
	listed := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(files[info+"RECORD"]))
	for sc.Scan() {
		fields := strings.Split(sc.Text(), ",")
		if len(fields) != 3 {
			t.Fatalf("RECORD line %q", sc.Text())
		}
		name, hash, size := fields[0], fields[1], fields[2]
		listed[name] = true
		data, ok := files[name]
		if !ok {
			t.Errorf("RECORD lists %s, which the wheel lacks", name)
			continue
		}
		if name == info+"RECORD" {
			if hash != "" || size != "" {
				t.Errorf("RECORD's own line %q, want no hash", sc.Text())
			}
			continue
		}
		sum := sha256.Sum256(data)
		if hash != "sha256="+base64.RawURLEncoding.EncodeToString(sum[:]) || size != fmt.Sprint(len(data)) {
			t.Errorf("RECORD line %q does not match the file (%d bytes)", sc.Text(), len(data))
		}
	}
	for name := range files {
		if !listed[name] {
			t.Errorf("%s is not in RECORD", name)
		}
	}
	for file, want := range map[string]string{
		info + "WHEEL":    "Tag: py3-none-" + platforms[runtime.GOARCH].tag + "\n",
		info + "METADATA": "Name: cudatap\nVersion: 1.2.3.post4+gabc1234\n",
		info + "LICENSE":  "Apache License\n",
	} {
		if !strings.Contains(string(files[file]), want) {
			t.Errorf("%s lacks %q:\n%s", file, want, files[file])
		}
	}

	// The same inputs make the same bytes (SHA256SUMS stay put).
	again, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := build(options{binary: exe, arch: runtime.GOARCH, version: "v1.2.3-4-gabc1234", license: license, dir: dir}); err != nil {
		t.Fatal(err)
	}
	if now, _ := os.ReadFile(path); !bytes.Equal(now, again) {
		t.Error("a second build of the same wheel differs")
	}
}

func TestWheelWrongArch(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	other := map[string]string{"amd64": "arm64", "arm64": "amd64"}[runtime.GOARCH]
	if other == "" {
		t.Skipf("no wheel for %s", runtime.GOARCH)
	}
	_, err = build(options{binary: exe, arch: other, version: "v1.0.0", license: exe, dir: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "is built for") {
		t.Errorf("packing a %s binary as %s: %v, want an error naming the machine", runtime.GOARCH, other, err)
	}
}
