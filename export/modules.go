package export

import (
	"cmp"
	"slices"

	"github.com/cudatap/cudatap/export/pprofout"
	"github.com/cudatap/cudatap/tracer/model"
)

// Modules are the mappings the tracer recorded, for pprofout.Options: by
// process, then address.
func Modules(n *model.Names) []pprofout.Module {
	if n == nil {
		return nil
	}
	mods := make([]pprofout.Module, 0, len(n.Mappings))
	for k, m := range n.Mappings {
		mods = append(mods, pprofout.Module{PID: k.PID, File: m.File, BuildID: m.BuildID, Start: m.Start, Limit: m.Limit, Offset: m.Offset})
	}
	slices.SortFunc(mods, func(a, b pprofout.Module) int {
		return cmp.Or(cmp.Compare(a.PID, b.PID), cmp.Compare(a.Start, b.Start))
	})
	return mods
}
