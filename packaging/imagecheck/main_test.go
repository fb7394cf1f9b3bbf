package main

import (
	"debug/elf"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const pinned = "gcr.io/distroless/base-debian12@sha256:74ddbf52d93fafbdd21b399271b0b4aac1babf8fa98cab59e5692e01169a1348"

// good is a recipe that passes; each case below breaks one thing in it.
var good = `# comment
FROM ` + pinned + `
ARG TARGETARCH
COPY dist/cudatap-linux-${TARGETARCH} \
     /usr/local/bin/cudatap
COPY LICENSE /usr/share/doc/cudatap/
USER 0
ENTRYPOINT ["/usr/local/bin/cudatap"]
CMD ["agent"]
`

// TestDeployDockerfile: the recipe in deploy/ passes, on its own and
// against release files laid out as make release writes them.
func TestDeployDockerfile(t *testing.T) {
	data, err := os.ReadFile("../../deploy/Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	if _, problems := check(data, "../..", ""); len(problems) > 0 {
		t.Errorf("deploy/Dockerfile: %s", strings.Join(problems, "\n"))
	}
	context, dist := fakeRelease(t, "amd64", "arm64")
	summary, problems := check(data, context, dist)
	if len(problems) > 0 {
		t.Errorf("deploy/Dockerfile with a release: %s", strings.Join(problems, "\n"))
	}
	if !strings.Contains(summary, "dist/cudatap-linux-${TARGETARCH}") || !strings.Contains(summary, "as user 0") {
		t.Errorf("summary %q", summary)
	}
}

func TestCheckFindsProblems(t *testing.T) {
	for _, c := range []struct {
		name, old, new, want string
	}{
		{"unpinned base", pinned, "gcr.io/distroless/base-debian12:latest", "not pinned by digest"},
		{"TARGETARCH default", "ARG TARGETARCH\n", "ARG TARGETARCH=amd64\n", "a default wins"},
		{"undeclared arg", "ARG TARGETARCH\n", "", "not declared with ARG"},
		{"shell form", `ENTRYPOINT ["/usr/local/bin/cudatap"]`, "ENTRYPOINT /usr/local/bin/cudatap", "not in exec form"},
		{"entrypoint not copied", `ENTRYPOINT ["/usr/local/bin/cudatap"]`, `ENTRYPOINT ["/bin/cudatap"]`, "not what a COPY"},
		{"no user", "USER 0\n", "", "no USER"},
		{"ADD", "COPY LICENSE", "ADD LICENSE", "use COPY"},
		{"URL", "COPY LICENSE", "COPY https://example.com/LICENSE", "copies a URL"},
		{"no base", "FROM " + pinned + "\n", "", "no pinned base image"},
		{"missing file", "COPY LICENSE", "COPY NOTICE", "NOTICE: stat"},
	} {
		t.Run(c.name, func(t *testing.T) {
			recipe := strings.Replace(good, c.old, c.new, 1)
			if recipe == good {
				t.Fatalf("%q is not in the recipe", c.old)
			}
			context, dist := fakeRelease(t, "amd64", "arm64")
			_, problems := check([]byte(recipe), context, dist)
			if !strings.Contains(strings.Join(problems, "\n"), c.want) {
				t.Errorf("problems %q, want one saying %q", problems, c.want)
			}
		})
	}
	context, dist := fakeRelease(t, "amd64", "arm64")
	if _, problems := check([]byte(good), context, dist); len(problems) > 0 {
		t.Errorf("the good recipe: %q", problems)
	}
}

// A multi-stage recipe: a stage is no base image to pin, COPY --from is no
// file of the context.
func TestCheckStages(t *testing.T) {
	recipe := "FROM " + pinned + " AS build\nRUN true\nFROM build\nCOPY --from=build /x /usr/local/bin/cudatap\nUSER 65532\nENTRYPOINT [\"/usr/local/bin/cudatap\"]\n"
	context, dist := fakeRelease(t, "amd64", "arm64")
	if _, problems := check([]byte(recipe), context, dist); len(problems) > 0 {
		t.Errorf("%q", problems)
	}
}

// The binaries swapped, or one missing: each platform would get the wrong
// one, or none.
func TestCheckReleaseFiles(t *testing.T) {
	context, dist := fakeRelease(t, "arm64", "amd64") // amd64's name holds an arm64 binary
	_, problems := check([]byte(good), context, dist)
	got := strings.Join(problems, "\n")
	for _, want := range []string{"copied for linux/amd64: built for EM_AARCH64, not EM_X86_64", "copied for linux/arm64: built for EM_X86_64, not EM_AARCH64"} {
		if !strings.Contains(got, want) {
			t.Errorf("problems %q, want %q", got, want)
		}
	}
	if err := os.Remove(filepath.Join(dist, "cudatap-linux-arm64")); err != nil {
		t.Fatal(err)
	}
	if _, problems := check([]byte(good), context, dist); !strings.Contains(strings.Join(problems, "\n"), "dist/cudatap-linux-arm64: stat") {
		t.Errorf("problems %q, want the missing arm64 binary", problems)
	}
}

// fakeRelease lays out a context with a LICENSE and a dist directory whose
// cudatap-linux-amd64 and -arm64 are ELF headers for the machines named.
func fakeRelease(t *testing.T, amd64, arm64 string) (context, dist string) {
	t.Helper()
	context = t.TempDir()
	dist = filepath.Join(context, "dist")
	if err := os.Mkdir(dist, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(context, "LICENSE"), []byte("Apache License\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	machines := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}
	for name, arch := range map[string]string{"amd64": amd64, "arm64": arm64} {
		if err := os.WriteFile(filepath.Join(dist, "cudatap-linux-"+name), elfHeader(machines[arch]), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return context, dist
}

// elfHeader is a 64-bit little-endian ELF executable header and nothing
// else: enough for debug/elf to read its machine.
func elfHeader(m elf.Machine) []byte {
	h := elf.Header64{Type: uint16(elf.ET_EXEC), Machine: uint16(m), Version: uint32(elf.EV_CURRENT), Ehsize: 64}
	copy(h.Ident[:], elf.ELFMAG)
	h.Ident[elf.EI_CLASS] = byte(elf.ELFCLASS64)
	h.Ident[elf.EI_DATA] = byte(elf.ELFDATA2LSB)
	h.Ident[elf.EI_VERSION] = byte(elf.EV_CURRENT)
	b, err := binary.Append(nil, binary.LittleEndian, h)
	if err != nil {
		panic(err)
	}
	return b
}
