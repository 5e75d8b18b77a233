//go:build !linux

package main

import "syscall"

// egressProcAttr: without Pdeathsig the egress proxy stops when its
// standard input, a pipe from this process, reaches end of file.
func egressProcAttr() *syscall.SysProcAttr { return nil }
