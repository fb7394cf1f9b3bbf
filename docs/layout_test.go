// Package docs holds cudatap's documentation; its test checks that
// design.md's layout table is the tracer's import graph.
package docs

import (
	"bufio"
	"bytes"
	"maps"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/cudatap/cudatap/"

// TestLayoutImportsOneWay: the import graph of tracer/... runs one way, as
// design.md's layout table says ("one stage per package, imports one way
// (top to bottom)"). Every package under tracer/ has a row of its own (a
// package nested in a listed one, as tracer/gputime/collector, is part of
// its stage), and every import to or from one goes to a row below, or
// stays in the stage. Within a row the packages are in order, left to
// right. Go refuses import cycles itself; this forbids the upward imports
// that would let one in later. Only the packages' own imports count: a
// test may import what it likes.
func TestLayoutImportsOneWay(t *testing.T) {
	rank := layoutTable(t, "design.md")
	stage := func(pkg string) (string, bool) {
		best := ""
		for s := range rank {
			if (pkg == s || strings.HasPrefix(pkg, s+"/")) && len(s) > len(best) {
				best = s
			}
		}
		// tracer's subpackages are stages of their own, not parts of the session.
		return best, best != "" && (best != "tracer" || pkg == "tracer")
	}
	imports := moduleImports(t)
	unlisted := map[string]bool{}
	checked := 0
	for _, pkg := range slices.Sorted(maps.Keys(imports)) {
		from, fromOK := stage(pkg)
		for _, imp := range imports[pkg] {
			if !inTracer(pkg) && !inTracer(imp) {
				continue
			}
			checked++
			to, toOK := stage(imp)
			unlisted[pkg] = unlisted[pkg] || !fromOK
			unlisted[imp] = unlisted[imp] || !toOK
			if fromOK && toOK && from != to && rank[to] <= rank[from] {
				t.Errorf("%s imports %s, above it in design.md's layout table (%s at place %d from the top, %s at %d): imports run top to bottom",
					pkg, imp, to, rank[to], from, rank[from])
			}
		}
		unlisted[pkg] = unlisted[pkg] || inTracer(pkg) && !fromOK
	}
	for _, pkg := range slices.Sorted(maps.Keys(unlisted)) {
		if unlisted[pkg] {
			t.Errorf("%s has no row in design.md's layout table: add one where its imports put it", pkg)
		}
	}
	if checked < 20 {
		t.Errorf("only %d imports to or from tracer/ checked: the graph was not read", checked)
	}
}

func inTracer(pkg string) bool { return pkg == "tracer" || strings.HasPrefix(pkg, "tracer/") }

// layoutTable reads the layout table of the design document at path: each
// package it names (`tracer/event`; `export/` stands for export and what
// is under it) by its place, counting from the top, row by row and left to
// right within a row.
func layoutTable(t *testing.T, path string) map[string]int {
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := bytes.Cut(data, []byte("Layout, one stage per package, imports one way"))
	if !ok {
		t.Fatalf("%s: no layout table (the line \"Layout, one stage per package, imports one way\")", path)
	}
	name := regexp.MustCompile("`([^`]+)`")
	rank := map[string]int{}
	sc := bufio.NewScanner(bytes.NewReader(table))
	for started := false; sc.Scan(); {
		line := sc.Text()
		if !strings.HasPrefix(line, "|") {
			if started {
				break
			}
			continue
		}
		started = true
		cells := strings.Split(line, "|")
		for _, m := range name.FindAllStringSubmatch(cells[1], -1) {
			pkg := strings.TrimSuffix(m[1], "/")
			if _, dup := rank[pkg]; dup {
				t.Errorf("%s: %s has two rows in the layout table", path, pkg)
			}
			rank[pkg] = len(rank)
		}
	}
	if _, ok := rank["tracer"]; !ok {
		t.Fatalf("%s: the layout table has no row for tracer: %v", path, rank)
	}
	return rank
}

// moduleImports lists, by the go command, each package of the module and
// the module's packages it imports (without the module's prefix).
func moduleImports(t *testing.T) map[string][]string {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to read the import graph: %v", err)
	}
	cmd := exec.Command(gobin, "list", "-e", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, module+"...")
	cmd.Stderr = new(bytes.Buffer)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, cmd.Stderr)
	}
	imports := map[string][]string{}
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		if len(f) == 0 || !strings.HasPrefix(f[0], module) {
			continue
		}
		pkg := strings.TrimPrefix(f[0], module)
		imports[pkg] = []string{}
		for _, imp := range f[1:] {
			if rest, ok := strings.CutPrefix(imp, module); ok {
				imports[pkg] = append(imports[pkg], rest)
			}
		}
	}
	return imports
}
