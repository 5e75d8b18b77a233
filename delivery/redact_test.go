package delivery

import (
	"context"
	"strings"
	"testing"

	"github.com/lockstep-hq/lockstep"
)

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
