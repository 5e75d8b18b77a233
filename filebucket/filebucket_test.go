package filebucket_test

import (
	"context"
	"strings"
	"testing"

	"github.com/lockstep-hq/lockstep/bucket"
	"github.com/lockstep-hq/lockstep/bucket/buckettest"
	"github.com/lockstep-hq/lockstep/filebucket"
)

func TestContract(t *testing.T) {
	buckettest.Run(t, func(t *testing.T) bucket.Bucket {
		loc, err := filebucket.Location("file://"+t.TempDir()+"/packs", nil)
		if err != nil {
			t.Fatal(err)
		}
		b, err := loc.Open(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return b
	})
}

func TestLocation(t *testing.T) {
	for _, raw := range []string{"file://host/dir", "file:relative", "file:///dir?x=1", "file://"} {
		if _, err := filebucket.Location(raw, nil); err == nil || !strings.Contains(err.Error(), "file:///absolute/directory") {
			t.Errorf("%q: got %v, want an error showing the form", raw, err)
		}
	}
	reg := bucket.Backends{"file": filebucket.Location}
	if _, err := reg.Parse("LOCKSTEP_OBJECT_STORE", "gs://x", nil); err == nil || !strings.Contains(err.Error(), `not scheme "gs": want one of file://`) {
		t.Errorf("unknown scheme: %v", err)
	}
	loc, err := reg.Parse("LOCKSTEP_OBJECT_STORE", "file:///srv/packs/", nil)
	if err != nil || loc.String() != "file:///srv/packs" {
		t.Errorf("got %v, %v", loc, err)
	}
}
