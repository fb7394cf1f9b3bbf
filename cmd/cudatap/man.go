package main

import (
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

// newManCmd writes the man pages: one per command, made from the same
// help text `cudatap CMD --help` prints, so they cannot drift from the
// CLI. Hidden: it is for `make man` and packagers, not for users.
func newManCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "man DIR",
		Short:  "Write a man page for every command into DIR (section 1)",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return writeManPages(cmd.Root(), args[0])
		},
	}
}

// writeManPages writes DIR/cudatap.1, DIR/cudatap-record.1, ... for every
// command a user can run (not help, not hidden ones).
func writeManPages(root *cobra.Command, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("man pages: %w", err)
	}
	b := readBuildInfo()
	header := &doc.GenManHeader{Section: "1", Source: "cudatap " + b.Version, Manual: "cudatap manual"}
	// The page's date: the commit's when the build knows it, else
	// SOURCE_DATE_EPOCH (make man sets it from the commit), else now.
	if t, err := time.Parse(time.RFC3339, b.CommitTime); err == nil {
		header.Date = &t
	}
	// No "auto generated on DATE" footer: the same tree makes the same pages.
	var quiet func(*cobra.Command)
	quiet = func(c *cobra.Command) {
		c.DisableAutoGenTag = true
		for _, sub := range c.Commands() {
			quiet(sub)
		}
	}
	quiet(root)
	if err := doc.GenManTree(root, header, dir); err != nil {
		return fmt.Errorf("man pages into %s: %w", dir, err)
	}
	return nil
}
