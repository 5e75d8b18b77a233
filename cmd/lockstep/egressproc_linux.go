package main

import "syscall"

// egressProcAttr makes the egress proxy's process get SIGTERM when this
// one dies (it also stops when its standard input, a pipe from this
// process, reaches end of file).
func egressProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
}
