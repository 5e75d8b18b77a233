package web

import (
	"bufio"
	"io"
	"strings"
	"testing"

	"github.com/lockstep-hq/lockstep/repositories"
)

// TestNamespacedRef: a deepen-not name resolves as git's expand_ref
// does, in the repository's namespace; none or several matches are left
// to git (which refuses them as ambiguous).
func TestNamespacedRef(t *testing.T) {
	refs := []repositories.AdvertisedRef{{Name: "refs/heads/main"}, {Name: "refs/heads/both"}, {Name: "refs/tags/both"}, {Name: "refs/tags/v1"}}
	for _, c := range []struct{ name, want string }{
		{"main", "refs/namespaces/ws/refs/heads/main"},
		{"v1", "refs/namespaces/ws/refs/tags/v1"},
		{"refs/tags/v1", "refs/namespaces/ws/refs/tags/v1"},
		{"heads/main", "refs/namespaces/ws/refs/heads/main"},
		{"HEAD", "refs/namespaces/ws/refs/heads/main"},
		{"both", ""},
		{"nosuch", ""},
		{"refs/heads/both", "refs/namespaces/ws/refs/heads/both"},
	} {
		got, ok := namespacedRef("ws", "refs/heads/main", refs, c.name)
		if got != c.want || ok != (c.want != "") {
			t.Errorf("%s: %q %v, want %q", c.name, got, ok, c.want)
		}
	}
}

// TestDeepenNotReader: only the deepen-not lines of the first section
// change (a name that is no ref of the repository to one that cannot
// exist, never left for git to resolve elsewhere in the network);
// delimiters, other lines and everything after the flush pass through
// byte for byte.
func TestDeepenNotReader(t *testing.T) {
	pkt := func(l string) string { return hex4(len(l)+4) + l }
	req := pkt("command=fetch\n") + "0001" + pkt("want 0123\n") + pkt("deepen-not v1\n") + pkt("deepen-not nosuch\n") + "0000" + pkt("deepen-not v1\n") + "tail"
	want := pkt("command=fetch\n") + "0001" + pkt("want 0123\n") + pkt("deepen-not refs/namespaces/ws/refs/tags/v1\n") + pkt("deepen-not refs/namespaces/ws/refs/heads/..unresolved\n") + "0000" + pkt("deepen-not v1\n") + "tail"
	d := &deepenNotReader{br: bufio.NewReaderSize(strings.NewReader(req), 64<<10), repo: "ws", resolve: func(n string) (string, bool) {
		return namespacedRef("ws", "", []repositories.AdvertisedRef{{Name: "refs/tags/v1"}}, n)
	}}
	got, err := io.ReadAll(d)
	if err != nil || string(got) != want {
		t.Fatalf("got %q, %v\nwant %q", got, err, want)
	}
	if len(d.unresolved) != 1 || d.firstUnresolved() != "nosuch" {
		t.Fatalf("unresolved %q, want [nosuch]", d.unresolved)
	}
}

func hex4(n int) string {
	const digits = "0123456789abcdef"
	return string([]byte{digits[n>>12&15], digits[n>>8&15], digits[n>>4&15], digits[n&15]})
}
