//go:build race

package worktree_test

// raceEnabled shrinks the content (not the shape) of the big generated
// trees: deflating 20 MB under the race detector takes most of a minute.
const raceEnabled = true
