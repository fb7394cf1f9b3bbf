package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
)

// onOff is a switch flag that is on by default: --NAME and --NAME=on turn it
// on, --NAME=off off (true/false and 1/0 are taken too, as for a bool flag).
type onOff struct{ v *bool }

// onOffFlag defines --name on cmd, bound to v, whose default is def.
func onOffFlag(cmd *cobra.Command, v *bool, name string, def bool, usage string) {
	*v = def
	cmd.Flags().Var(onOff{v}, name, usage)
	cmd.Flags().Lookup(name).NoOptDefVal = "on"
}

func (o onOff) String() string {
	if o.v != nil && *o.v {
		return "on"
	}
	return "off"
}

func (o onOff) Set(s string) error {
	switch strings.ToLower(s) {
	case "on", "true", "1":
		*o.v = true
	case "off", "false", "0":
		*o.v = false
	default:
		return fmt.Errorf("%q: want on or off", s)
	}
	return nil
}

func (onOff) Type() string { return "on|off" }
