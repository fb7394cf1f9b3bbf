//go:build !linux

package flight

import "errors"

func watchExits(func(pid, status uint32, at uint64)) (func(), error) {
	return nil, errors.New("process exits are watched on Linux only")
}
