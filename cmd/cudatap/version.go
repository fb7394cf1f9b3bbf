package main

import (
	"encoding/json"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"

	"github.com/cudatap/cudatap/tracer/recording"
)

// Set at build time by `make build` (-ldflags "-X main.version=... -X
// main.bpfObject=..."). A plain `go build` leaves "dev" and "": `cudatap
// version` then takes the module version Go recorded (`go install
// ...@v1.2.3`), and the commit from the build's VCS stamp either way.
var (
	version   = "dev"
	bpfObject = "" // the first 16 hex digits of the BPF object's SHA-256
)

// buildInfo is what `cudatap version` says, and `version --json` writes.
type buildInfo struct {
	Version         string `json:"version"`
	Commit          string `json:"commit,omitempty"`      // vcs.revision
	CommitTime      string `json:"commit_time,omitempty"` // vcs.time, RFC 3339
	Modified        bool   `json:"modified,omitempty"`    // built from a tree with uncommitted changes
	Go              string `json:"go"`
	Platform        string `json:"platform"`
	RecordingFormat int    `json:"recording_format"`
	BPFObject       string `json:"bpf_object,omitempty"`
}

func readBuildInfo() buildInfo {
	b := buildInfo{Version: version, Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH,
		RecordingFormat: recording.Version, BPFObject: bpfObject}
	if info, ok := debug.ReadBuildInfo(); ok {
		if b.Version == "dev" && info.Main.Version != "" && info.Main.Version != "(devel)" {
			b.Version = info.Main.Version
		}
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				b.Commit = s.Value
			case "vcs.time":
				b.CommitTime = s.Value
			case "vcs.modified":
				b.Modified = s.Value == "true"
			}
		}
	}
	return b
}

// String is the one line `--version` prints.
func (b buildInfo) String() string {
	var parts []string
	if b.Commit != "" {
		c := "commit " + b.Commit[:min(12, len(b.Commit))]
		if b.CommitTime != "" {
			c += " of " + b.CommitTime
		}
		if b.Modified {
			c += ", modified"
		}
		parts = append(parts, c)
	}
	parts = append(parts, b.Go, b.Platform, fmt.Sprintf("recording format v%d", b.RecordingFormat))
	if b.BPFObject != "" {
		parts = append(parts, "BPF object sha256:"+b.BPFObject)
	}
	return fmt.Sprintf("cudatap %s (%s)", b.Version, strings.Join(parts, ", "))
}

func newVersionCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print cudatap's version, commit, Go version and recording format (also: cudatap --version)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return writeVersion(cmd.OutOrStdout(), asJSON)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "write JSON: version, commit, commit_time, modified, go, platform, recording_format, bpf_object")
	return cmd
}

func writeVersion(w io.Writer, asJSON bool) error {
	b := readBuildInfo()
	if asJSON {
		return writeJSON(w, b)
	}
	_, err := fmt.Fprintln(w, b)
	return err
}

// writeJSON writes v as the commands' --json outputs are written: one
// indented document and a newline.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
