package storetest

import (
	"sort"
	"strings"
	"testing"
)

// TestSuiteCoversEveryMethod fails when a method of a store interface has
// no contract test here (add one to the map of its interface's file), or
// when a test names a method that no longer exists.
func TestSuiteCoversEveryMethod(t *testing.T) {
	tested := map[string]bool{}
	for _, name := range Methods() {
		tested[strings.SplitN(name, "/", 2)[0]] = true
	}
	declared := map[string]string{}
	for _, it := range Interfaces() {
		for i := 0; i < it.NumMethod(); i++ {
			declared[it.Method(i).Name] = it.String()
		}
	}
	var missing, stale []string
	for m, it := range declared {
		if !tested[m] {
			missing = append(missing, it+"."+m)
		}
	}
	for m := range tested {
		if _, ok := declared[m]; !ok {
			stale = append(stale, m)
		}
	}
	sort.Strings(missing)
	sort.Strings(stale)
	if len(missing) > 0 {
		t.Errorf("store methods without a contract test: %v", missing)
	}
	if len(stale) > 0 {
		t.Errorf("contract tests of methods no interface declares: %v", stale)
	}
	if len(declared) < 40 {
		t.Fatalf("only %d methods found: the interface list is wrong", len(declared))
	}
}
