package s3packs

import (
	"testing"

	"github.com/lockstep-hq/lockstep/bucket"
	"github.com/lockstep-hq/lockstep/bucket/buckettest"
)

// TestBucketContract runs the bucket contract on a fresh bucket of the
// real S3 server (versitygw) each time.
func TestBucketContract(t *testing.T) {
	buckettest.Run(t, func(t *testing.T) bucket.Bucket {
		s, _, _ := mustStore(t)
		return s
	})
}
