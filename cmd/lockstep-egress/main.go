// Command lockstep-egress is the egress proxy of `lockstep run` as a
// small build of its own (package egressproc): the client build starts it
// beside the run instead of linking the proxy and its dependencies
// (github.com/elazarl/goproxy), which would slow every client command's
// start. The server build runs the same code as `lockstep-server
// __egress`. docs/architecture.md, "Three builds".
package main

import (
	"os"

	"github.com/lockstep-hq/lockstep/egress/egressproc"
)

func main() {
	os.Exit(egressproc.Main(os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr))
}
