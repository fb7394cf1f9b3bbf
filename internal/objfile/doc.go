// Package objfile opens and indexes the object files that processes map,
// and reads their memory maps: the one place cudatap does either.
//
//   - maps: [ReadMaps] parses /proc/PID/maps (read by internal/procfs) into
//     [Mapping]s, grouped per file by [ObjectFiles];
//   - opening: [Mapping.OpenPath] finds a path to a mapped file from the
//     host, through /proc/PID/map_files or else /proc/PID/root, which
//     [OpenFile] resolves inside the target's root;
//   - symbols: a [File] looks symbols up by name (discovery: where to put a
//     uprobe) and by address (naming), and converts between ELF virtual
//     addresses and file offsets.
//
// ELF symbol tables are indexed lazily, on the first lookup, into one
// compact sorted slice per file (no per-symbol allocations; the names stay
// in the file, read when an address is named), and files are shared
// between processes through a [Cache] keyed by build-id. The package
// is pure Go (no cgo) and needs no privileges beyond reading
// /proc/PID/{maps,map_files,root} of the target.
package objfile
