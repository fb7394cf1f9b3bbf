// Command imagecheck lints the agent's image recipe where no container
// engine can build it (CI has none): every base image pinned by digest, the
// image made of the release binaries (every file it copies exists in the
// build context, and a binary copied for TARGETARCH is an ELF for that
// architecture, TARGETARCH left to BuildKit), the entrypoint in exec form
// and copied in, the user set explicitly.
//
//	go run ./packaging/imagecheck [-dist dist] deploy/Dockerfile
//
// Without -dist only the recipe itself is checked (the unit test does that).
package main

import (
	"bufio"
	"bytes"
	"debug/elf"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
)

func main() {
	dist := flag.String("dist", "", "the release directory (make release's DIST): check the files the recipe copies from dist/ there, for each platform")
	context := flag.String("context", ".", "the build context the recipe is built from (the repository root)")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: go run ./packaging/imagecheck [-dist DIR] [-context DIR] Dockerfile")
		os.Exit(2)
	}
	file := flag.Arg(0)
	data, err := os.ReadFile(file)
	if err != nil {
		fmt.Fprintln(os.Stderr, "imagecheck:", err)
		os.Exit(1)
	}
	summary, problems := check(data, *context, *dist)
	for _, p := range problems {
		fmt.Fprintf(os.Stderr, "%s: %s\n", file, p)
	}
	if len(problems) > 0 {
		os.Exit(1)
	}
	fmt.Printf("%s: ok: %s\n", file, summary)
}

// platforms the image is built for (docker buildx --platform), with the ELF
// machine of the binary copied for each.
var platforms = []struct {
	arch    string
	machine elf.Machine
}{{"amd64", elf.EM_X86_64}, {"arm64", elf.EM_AARCH64}}

type instruction struct {
	line int
	cmd  string // upper case
	args string
}

// parse splits a Dockerfile into instructions: comments and blank lines
// dropped, lines ending in a backslash joined.
func parse(data []byte) []instruction {
	var out []instruction
	var cur *instruction
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		more := strings.HasSuffix(line, `\`)
		line = strings.TrimSpace(strings.TrimSuffix(line, `\`))
		if cur == nil {
			cmd, args, _ := strings.Cut(line, " ")
			cur = &instruction{line: n, cmd: strings.ToUpper(cmd), args: strings.TrimSpace(args)}
		} else {
			cur.args += " " + line
		}
		if !more {
			out = append(out, *cur)
			cur = nil
		}
	}
	if cur != nil {
		out = append(out, *cur)
	}
	return out
}

// automatic are the ARGs BuildKit sets from --platform.
var automatic = map[string]bool{"TARGETPLATFORM": true, "TARGETOS": true, "TARGETARCH": true, "TARGETVARIANT": true}

var (
	digest  = regexp.MustCompile(`@sha256:[0-9a-f]{64}$`)
	argRef  = regexp.MustCompile(`\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?`)
	urlLike = regexp.MustCompile(`^[a-z]+://`)
)

// check returns a one-line summary of the recipe and what is wrong with it.
// dist, if set, is where the files it copies from dist/ are.
func check(data []byte, context, dist string) (string, []string) {
	var problems []string
	bad := func(in instruction, format string, args ...any) {
		problems = append(problems, fmt.Sprintf("line %d (%s): %s", in.line, in.cmd, fmt.Sprintf(format, args...)))
	}
	stages := map[string]bool{}
	args := map[string]bool{} // ARGs declared so far in this stage
	var bases, copied []string
	written := map[string]bool{} // paths COPY writes in the final stage
	var user, entry string
	for _, in := range parse(data) {
		switch in.cmd {
		case "FROM":
			f := strings.Fields(in.args)
			var image string
			for _, w := range f {
				if !strings.HasPrefix(w, "--") {
					image = w
					break
				}
			}
			if len(f) >= 3 && strings.EqualFold(f[len(f)-2], "AS") {
				stages[f[len(f)-1]] = true
			}
			switch {
			case image == "":
				bad(in, "no image")
			case stages[image] || image == "scratch":
			case !digest.MatchString(image):
				bad(in, "base image %s is not pinned by digest (IMAGE@sha256:...): the same recipe could build another image tomorrow; docker buildx imagetools inspect %s names the digest", image, image)
			default:
				bases = append(bases, image)
			}
			args = map[string]bool{}
			written = map[string]bool{}
			user, entry = "", ""
		case "ARG":
			name, value, hasDefault := strings.Cut(in.args, "=")
			name = strings.TrimSpace(name)
			args[name] = true
			if hasDefault && automatic[name] {
				bad(in, "%s=%s: a default wins over the value BuildKit sets for each platform (every platform would get %s's files); declare it without one", name, value, value)
			}
		case "USER":
			user = in.args
		case "ADD":
			bad(in, "use COPY: ADD fetches URLs and unpacks archives, which a release image should not")
		case "COPY", "ENTRYPOINT":
			for _, m := range argRef.FindAllStringSubmatch(in.args, -1) {
				if !args[m[1]] {
					bad(in, "$%s is not declared with ARG in this stage, so it is empty", m[1])
				}
			}
		}
		switch in.cmd {
		case "COPY":
			var words []string
			from := false
			for _, w := range strings.Fields(in.args) {
				if strings.HasPrefix(w, "--from=") {
					from = true
				}
				if !strings.HasPrefix(w, "--") {
					words = append(words, w)
				}
			}
			if len(words) < 2 {
				bad(in, "COPY needs a source and a destination")
				continue
			}
			dest := words[len(words)-1]
			for _, src := range words[:len(words)-1] {
				if strings.HasSuffix(dest, "/") {
					written[path.Join(dest, path.Base(src))] = true
				} else {
					written[dest] = true
				}
				switch {
				case from: // a file of another stage
				case urlLike.MatchString(src):
					bad(in, "copies a URL")
				default:
					copied = append(copied, src)
					for _, p := range checkSource(src, context, dist) {
						bad(in, "%s", p)
					}
				}
			}
		case "ENTRYPOINT":
			var argv []string
			if err := json.Unmarshal([]byte(in.args), &argv); err != nil || len(argv) == 0 {
				bad(in, "not in exec form ([\"/usr/local/bin/cudatap\", ...]): the shell form runs the agent under /bin/sh, which does not pass SIGTERM on")
				continue
			}
			entry = argv[0]
			if !written[entry] {
				bad(in, "%s is not what a COPY of this stage writes", entry)
			}
		}
	}
	if len(bases) == 0 {
		problems = append(problems, "no pinned base image (FROM IMAGE@sha256:...)")
	}
	if user == "" {
		problems = append(problems, "no USER in the final stage: say whom the agent runs as (root needs a reason in a comment)")
	}
	if entry == "" {
		problems = append(problems, "no ENTRYPOINT in the final stage")
	}
	return fmt.Sprintf("base %s, copies %s, runs %s as user %s", strings.Join(bases, ", "), strings.Join(copied, " "), entry, user), problems
}

// checkSource: src, a COPY source, exists in the context for every
// platform (dist/ read as dist), and is an ELF for the platform when it is
// one file per platform ($TARGETARCH in its name). Empty dist: nothing is
// looked up.
func checkSource(src, context, dist string) []string {
	if dist == "" {
		return nil
	}
	perArch := strings.Contains(src, "TARGETARCH")
	var problems []string
	for _, p := range platforms {
		name := strings.NewReplacer("${TARGETARCH}", p.arch, "$TARGETARCH", p.arch).Replace(src)
		if strings.Contains(name, "$") {
			return append(problems, src+": only $TARGETARCH is known here")
		}
		file := filepath.Join(context, filepath.FromSlash(name))
		if rest, ok := strings.CutPrefix(name, "dist/"); ok {
			file = filepath.Join(dist, filepath.FromSlash(rest))
		}
		if _, err := os.Stat(file); err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v (make release writes dist/)", name, err))
		} else if perArch {
			if err := checkMachine(file, p.machine); err != nil {
				problems = append(problems, fmt.Sprintf("%s, copied for linux/%s: %v", file, p.arch, err))
			}
		}
		if !perArch {
			break // the same file for every platform
		}
	}
	return problems
}

func checkMachine(file string, want elf.Machine) error {
	f, err := elf.Open(file)
	if err != nil {
		var fe *elf.FormatError
		if errors.As(err, &fe) || errors.Is(err, io.EOF) {
			return errors.New("not an ELF executable")
		}
		return err
	}
	defer f.Close()
	if f.Machine != want {
		return fmt.Errorf("built for %v, not %v", f.Machine, want)
	}
	return nil
}
