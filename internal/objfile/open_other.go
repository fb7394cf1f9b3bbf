//go:build !linux

package objfile

import "os"

func OpenFile(path string) (*os.File, error) { return os.Open(path) }

func statKeyOf(fi os.FileInfo) statKey {
	return statKey{size: fi.Size(), mtime: fi.ModTime().UnixNano()}
}
