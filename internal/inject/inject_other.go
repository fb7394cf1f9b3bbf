//go:build !(linux && amd64)

package inject

import (
	"errors"
	"fmt"
	"time"
)

var errUnsupported = fmt.Errorf("inject: x86-64 Linux only: %w", errors.ErrUnsupported)

func Dlopen(pid int, path string) (uint64, error)               { return 0, errUnsupported }
func Dlclose(pid int, handle uint64) error                      { return errUnsupported }
func Call(pid int, addr uint64, args ...uint64) (uint64, error) { return 0, errUnsupported }
func Symbol(pid int, lib, name string) (uint64, error)          { return 0, errUnsupported }

type Held struct{}

func HoldThread(pid, tid int) (*Held, error) { return nil, errUnsupported }
func (h *Held) Release() error               { return errUnsupported }

func WaitStopped(tid int, timeout time.Duration) bool { return false }
