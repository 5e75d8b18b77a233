package lockstep_test

import (
	"testing"

	"github.com/lockstep-hq/lockstep"
)

func TestRedactURL(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"https://h.example/hook", "https://h.example/hook"},
		{"https://h.example/hook?token=s3cr3t&x=1", "https://h.example/hook?token=[redacted]&x=[redacted]"},
		{"https://h.example/a/b?token=s3cr3t#frag", "https://h.example/a/b?token=[redacted]"},
		{"https://h.example/a#frag?token=s3cr3t", "https://h.example/a"},
		{"https://h.example/?s3cr3t", "https://h.example/?[redacted]"},
		{"https://h.example/?a=&b=s3cr3t&&c", "https://h.example/?a=&b=[redacted]&&[redacted]"},
		{"https://h.example/?a=1;b=s3cr3t", "https://h.example/?a=[redacted]"},
		{"https://h.example/?", "https://h.example/"},
		{"https://user:s3cr3t@h.example:8443/p?k=s3cr3t", "https://h.example:8443/p?k=[redacted]"},
		{"https://s3cr3t@h.example", "https://h.example"},
		{"https://h.example/p@q", "https://h.example/p@q"},
		{"http://h.example/%zz?token=s3cr3t", "http://h.example/%zz?token=[redacted]"}, // unparsable
		{"example.com/hook?token=s3cr3t", "example.com/hook?token=[redacted]"},
		// Idempotent: a view redacted twice is the same view.
		{"https://h.example/hook?token=[redacted]&[redacted]", "https://h.example/hook?token=[redacted]&[redacted]"},
	} {
		if got := lockstep.RedactURL(tc.in); got != tc.want {
			t.Errorf("lockstep.RedactURL(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
