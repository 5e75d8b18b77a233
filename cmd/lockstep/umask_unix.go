//go:build unix

package main

import "syscall"

// privateUmask makes every file the server and its git subprocesses
// (index-pack, repack, upload-pack) create readable by the owner only:
// git writes packs and loose objects 0444 and the rest 0644 less the
// umask, so they land 0400 and 0600, directories 0700. Returns the
// previous mask.
func privateUmask() int { return syscall.Umask(0o077) }
