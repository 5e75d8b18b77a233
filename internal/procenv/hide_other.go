//go:build !linux

package procenv

// Hide does nothing outside Linux (see hide_linux.go).
func Hide() error { return nil }
