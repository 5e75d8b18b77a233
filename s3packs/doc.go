// Package s3packs is the object-storage adapter of issue #11: it keeps a
// fork network's immutable git packs (pack-<hash>.pack + .idx) in an
// S3-compatible bucket (AWS S3, R2, GCS interop, Ceph RGW, MinIO,
// versitygw…) through github.com/minio/minio-go/v7.
//
// # Configuration
//
//	LOCKSTEP_OBJECT_STORE=s3://BUCKET[/PREFIX]?endpoint=HOST:PORT&region=R&insecure=1&path_style=1&timeout=5s
//	AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN (optional)
//
// ParseConfig reads them (see it for every query key); Open checks at
// start-up, each step within the timeout, that the endpoint answers, the
// keys are accepted, the bucket exists and a probe object under the prefix
// can be written, read and deleted. Every failure is one line naming the
// setting to fix, so a misconfigured replica never half-starts.
//
// # Layout
//
//	<prefix>/networks/<network>/pack-<hash>.pack   the pack, named by its SHA-1 trailer
//	<prefix>/networks/<network>/pack-<hash>.idx    its index, uploaded after the pack
//
// A pack is written once (If-None-Match: *) and never rewritten: a name
// is its content. Uploads stream from the file (multipart, at most
// 2×8 MiB of part buffers); downloads stream to a temp file, are checked
// against the name (size, SHA-1 trailer, the index's pack checksum),
// fsynced and renamed into place.
//
// # Errors
//
// Operations return *lockstep.Error: unavailable for network failures and
// 5xx answers, not_found for a missing pack or bucket, permission_denied
// for 403, invalid_argument for bad names or content that does not match
// its name. Anything else is internal.
//
// # What is wired and what is not
//
// Nothing in the service uses this package yet: the replica wiring (the
// network's pack list in the metadata database, upload before the ref
// transaction, a local cache filled from the bucket, compaction and GC
// with a grace period) needs the network object-storage seam of issue
// #10 first; docs/replicas.md describes the design. ListPacks and
// DeletePack are the primitives GC will use; the truth about which packs
// are live will be the database, never a bucket listing.
package s3packs
