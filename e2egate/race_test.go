//go:build race

package e2egate

const raceEnabled = true
