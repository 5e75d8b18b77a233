package client_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/lockstep-hq/lockstep/client"
)

// A Go program pushes a directory with one call. The first push sends
// every object; the second, after one file changed, sends that file's
// blob and the root tree only.
func ExampleClient_PushDir() {
	ctx := context.Background()
	tmp, err := os.MkdirTemp("", "lockstep-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	srv, err := startServer(filepath.Join(tmp, "server")) // a real server, in-process
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()

	c := client.New(srv.URL, srv.Admin)
	if _, err := c.CreateRepo(ctx, "app", "main"); err != nil {
		log.Fatal(err)
	}
	dir := filepath.Join(tmp, "app")
	os.MkdirAll(filepath.Join(dir, "src"), 0o755)
	os.WriteFile(filepath.Join(dir, "README.md"), []byte("# app\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "src", "main.go"), []byte("package main\n"), 0o644)

	opts := client.PushDirOptions{
		WriteOptions:  client.WriteOptions{Message: "first"},
		ExpectCurrent: true, // compare-and-swap against the branch as it is now
		StatCache:     filepath.Join(tmp, "statcache"),
	}
	res, err := c.PushDir(ctx, "app", dir, opts)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("pushed %d files to %s: %d objects sent\n", res.Files, res.Branch, res.ObjectsSent)

	os.WriteFile(filepath.Join(dir, "README.md"), []byte("# app, now documented\n"), 0o644)
	opts.Message = "docs"
	res, err = c.PushDir(ctx, "app", dir, opts)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("pushed again: %d objects sent\n", res.ObjectsSent)
	// Output:
	// pushed 2 files to main: 4 objects sent
	// pushed again: 2 objects sent
}
