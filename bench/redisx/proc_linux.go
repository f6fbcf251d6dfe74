//go:build linux

package redisx

import "syscall"

// childAttr makes the child die with us even if we are killed.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
}

// ChildAttr is childAttr for other packages (worker processes).
func ChildAttr() *syscall.SysProcAttr { return childAttr() }
