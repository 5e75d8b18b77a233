//go:build !unix

package main

// privateUmask: no umask outside Unix.
func privateUmask() int { return 0 }
