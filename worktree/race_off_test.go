//go:build !race

package worktree_test

const raceEnabled = false
