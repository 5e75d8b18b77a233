package delivery

import (
	"context"
	"strings"
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
		if got := RedactURL(tc.in); got != tc.want {
			t.Errorf("RedactURL(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestTargetRefusalsHideTheQuery: a refused target URL's error names the
// URL without its query values or credentials (the error is shown to the
// client and written to the server log).
func TestTargetRefusalsHideTheQuery(t *testing.T) {
	ctx := context.Background()
	none, _ := ParseAllowList("")
	for _, u := range []string{
		"http://127.0.0.1:8080/hook?token=s3cr3t",
		"http://10.0.0.1/x?a=1&token=s3cr3t",
		"http://localhost/hook?token=s3cr3t",
		"http://0x7f.1/?token=s3cr3t",
		"https://user:s3cr3t@ci.example.com/hook?token=s3cr3t",
		"ftp://ci.example.com/?token=s3cr3t",
		"/relative?token=s3cr3t",
		"http://h.example/%zz?token=s3cr3t",
		"https:///?token=s3cr3t",
		"https://8.8.8.8/hook?lsenc1:s3cr3t",
	} {
		for _, check := range []func() error{
			func() error { return CheckHookURL(ctx, u, none, nil) },
			func() error {
				return CheckTargetURL(ctx, u, none, nil, "effect", "--effect-allow-hosts (LOCKSTEP_EFFECT_ALLOW_HOSTS)")
			},
		} {
			err := check()
			if lockstep.ErrorCode(err) != lockstep.EINVALID {
				t.Errorf("%s: %v, want invalid_argument", u, err)
				continue
			}
			if strings.Contains(err.Error(), "s3cr3t") {
				t.Errorf("BUG: the refusal of %s repeats the secret: %v", u, err)
			}
		}
	}
	if err := CheckHookURL(ctx, "http://10.0.0.1/x?a=1&token=s3cr3t", none, nil); !strings.Contains(err.Error(), "http://10.0.0.1/x?a=[redacted]&token=[redacted]") {
		t.Errorf("the refusal should name the redacted URL: %v", err)
	}
}
