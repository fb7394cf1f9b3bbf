package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/cudatap/cudatap/internal/agent"
	"github.com/cudatap/cudatap/internal/units"
)

type dumpOptions struct {
	agent     string
	token     string
	tokenFile string
}

func newDumpCmd(g *globalOptions) *cobra.Command {
	o := &dumpOptions{}
	cmd := &cobra.Command{
		Use:   "dump [PID]",
		Short: "Ask the local agent's flight recorder for a dump of a process (every process without PID)",
		Long: `dump asks the cudatap agent running on this host (--flight-recorder) to write what its flight
recorder holds of process PID now: its last calls, as a .cudatap in the agent's --dumps-dir with
an HTML report beside it (POST /dump?pid=PID). Without PID, every process the agent traces. It
prints where the dump is once written; cudatap report and cudatap export read it.`,
		Example: `  cudatap dump 4123
  cudatap dump --agent 10.0.0.5:9401 --token-file /etc/cudatap/token 4123`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runDump(cmd, g, o, args)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.agent, "agent", agent.DefaultListen, "the agent's address (its --listen)")
	f.StringVar(&o.token, "token", "", "the agent's bearer token (its --token)")
	f.StringVar(&o.tokenFile, "token-file", "", "read the agent's bearer token from this file")
	return cmd
}

func runDump(cmd *cobra.Command, g *globalOptions, o *dumpOptions, args []string) error {
	query := ""
	if len(args) == 1 {
		pid, err := strconv.ParseUint(args[0], 10, 32)
		if err != nil || pid == 0 {
			return usageError(fmt.Errorf("%q is not a process id", args[0]))
		}
		query = "?pid=" + args[0]
	}
	token := o.token
	if o.tokenFile != "" {
		b, err := os.ReadFile(o.tokenFile)
		if err != nil {
			return usageError(fmt.Errorf("--token-file: %w", err))
		}
		token = strings.TrimSpace(string(b))
	}
	base := o.agent
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), 2*time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/dump"+query, nil)
	if err != nil {
		return usageError(fmt.Errorf("--agent %q: %w", o.agent, err))
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		if errors.Is(err, syscall.ECONNREFUSED) {
			return fmt.Errorf("no agent answers on %s: start one with sudo cudatap agent --flight-recorder 30s, or give its address with --agent", o.agent)
		}
		return fmt.Errorf("asking the agent on %s: %w", o.agent, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		msg := strings.TrimSpace(string(body))
		if resp.StatusCode == http.StatusUnauthorized {
			msg += " (give the agent's token with --token or --token-file)"
		}
		return fmt.Errorf("the agent on %s: %s", o.agent, msg)
	}
	var ans agent.DumpAnswer
	if err := json.Unmarshal(body, &ans); err != nil {
		return fmt.Errorf("the agent on %s answered something else than a dump (is it a cudatap agent?): %w", o.agent, err)
	}
	out := cmd.OutOrStdout()
	fmt.Fprintf(out, "%s (%s, %d events", ans.Path, units.Bytes(uint64(ans.Bytes)), ans.Events)
	if ans.Restated > 0 {
		fmt.Fprintf(out, ", %d calls from before the window restated", ans.Restated)
	}
	if ans.Dropped > 0 {
		fmt.Fprintf(out, ", %d events of the window did not fit --flight-max-bytes", ans.Dropped)
	}
	fmt.Fprintln(out, ")")
	if ans.Report != "" {
		fmt.Fprintln(out, ans.Report)
	}
	fmt.Fprintf(g.notes(cmd), "cudatap: the dump is on the agent's host; open it with: cudatap report %s\n", ans.Path)
	return nil
}
