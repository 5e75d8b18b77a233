//go:build race

package e2ekit

// raceEnabled reports whether the test binary (and so this package) was
// built with -race.
const raceEnabled = true
