//go:build !linux

package redisx

import "syscall"

func childAttr() *syscall.SysProcAttr { return nil }

// ChildAttr is childAttr for other packages (worker processes).
func ChildAttr() *syscall.SysProcAttr { return nil }
