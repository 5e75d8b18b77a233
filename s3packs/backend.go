package s3packs

import (
	"context"
	"time"

	"github.com/lockstep-hq/lockstep/bucket"
)

// The s3:// backend of the bucket registry (bucket.Backends).
var _ bucket.Bucket = (*Store)(nil)

// Location parses raw (ParseConfig) into the bucket.Location of an
// S3-compatible bucket: the registry's s3:// backend.
func Location(raw string, getenv func(string) string) (bucket.Location, error) {
	c, err := ParseConfig(raw, getenv)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// Open reaches the bucket and runs the start-up checks (Open), four of
// them bounded by Timeout each.
func (c Config) Open(ctx context.Context) (bucket.Bucket, error) {
	ctx, cancel := context.WithTimeout(ctx, c.Timeout*4+5*time.Second)
	defer cancel()
	s, err := Open(ctx, c)
	if err != nil {
		return nil, err
	}
	return s, nil
}
