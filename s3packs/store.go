package s3packs

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/bucket"
)

// Upload tuning: multipart parts are read from the file at their offset
// (no copy of the whole pack), partThreads at a time, so an upload holds
// at most partThreads×partSize bytes of buffers.
const (
	partSize    = 8 << 20
	partThreads = 2
)

// Store keeps immutable pack files (+ their .idx) in one bucket, under
// <prefix>/networks/<network>/pack-<hash>.{pack,idx}. It is safe for
// concurrent use.
type Store struct {
	cfg    Config
	client *minio.Client
}

// New returns a Store for cfg without checking anything: use Open at
// start-up.
func New(cfg Config) (*Store, error) {
	return newStore(cfg, nil)
}

// attempts is how many times one request is sent: once, and one retry
// (a frozen server costs a write at most 2×Timeout plus a short backoff).
const attempts = 2

// newStore is New; wrap (tests only) wraps the HTTP transport, to count
// the requests a frozen server receives.
func newStore(cfg Config, wrap func(http.RoundTripper) http.RoundTripper) (*Store, error) {
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	tr := &http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		DialContext:         (&net.Dialer{Timeout: cfg.Timeout, KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout: cfg.Timeout,
		// A server that accepted the request but does not answer (frozen,
		// overloaded) is given Timeout, not more: one write must fail
		// within attempts×Timeout, not hang (issue 21 item 10).
		ResponseHeaderTimeout: cfg.Timeout,
		MaxIdleConnsPerHost:   16,
		IdleConnTimeout:       90 * time.Second,
		ExpectContinueTimeout: time.Second,
		DisableCompression:    true,
	}
	lookup := minio.BucketLookupAuto
	if cfg.PathStyle {
		lookup = minio.BucketLookupPath
	}
	var rt http.RoundTripper = tr
	if wrap != nil {
		rt = wrap(tr)
	}
	c, err := minio.New(cfg.Endpoint, &minio.Options{
		Creds:        credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, cfg.SessionToken),
		Secure:       !cfg.Insecure,
		Region:       cfg.Region,
		Transport:    rt,
		BucketLookup: lookup,
		MaxRetries:   attempts, // minio-go counts attempts, not retries
	})
	if err != nil {
		return nil, fmt.Errorf("%s: endpoint %q: %v", Setting, cfg.Endpoint, err)
	}
	return &Store{cfg: cfg, client: c}, nil
}

// Open returns a Store for cfg after checking, each within cfg.Timeout,
// that the endpoint answers, the credentials are accepted, the bucket
// exists, and a probe object can be written, read back and deleted under
// the prefix. Each failure is a one-line error naming LOCKSTEP_OBJECT_STORE
// or the credential variables.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	s, err := New(cfg)
	if err != nil {
		return nil, err
	}
	if err := s.Validate(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// Validate runs the start-up checks of Open.
func (s *Store) Validate(ctx context.Context) error {
	cfg := s.cfg
	step := func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, cfg.Timeout) }

	// A listing (GET, unlike HEAD, answers with an error code) checks the
	// endpoint, the keys and the bucket in one request.
	c1, cancel := step()
	var err error
	for obj := range s.client.ListObjects(c1, cfg.Bucket, minio.ListObjectsOptions{Prefix: s.key(""), MaxKeys: 1}) {
		err = obj.Err
		break
	}
	cancel()
	if err != nil {
		return s.startupError("list bucket", err)
	}

	var nonce [8]byte
	rand.Read(nonce[:])
	key := s.key(".lockstep-probe-" + hex.EncodeToString(nonce[:]))
	body := []byte("lockstep write probe " + hex.EncodeToString(nonce[:]))
	c2, cancel := step()
	_, err = s.client.PutObject(c2, cfg.Bucket, key, bytes.NewReader(body), int64(len(body)), minio.PutObjectOptions{ContentType: "text/plain"})
	cancel()
	if err != nil {
		return s.startupError("write probe object "+key, err)
	}
	c3, cancel := step()
	got, err := s.readSmall(c3, key)
	cancel()
	if err != nil {
		return s.startupError("read back probe object "+key, err)
	}
	if !bytes.Equal(got, body) {
		return fmt.Errorf("%s: probe object %s read back different bytes from %s", Setting, key, cfg)
	}
	c4, cancel := step()
	err = s.client.RemoveObject(c4, cfg.Bucket, key, minio.RemoveObjectOptions{})
	cancel()
	if err != nil {
		return s.startupError("delete probe object "+key, err)
	}
	return nil
}

func (s *Store) readSmall(ctx context.Context, key string) ([]byte, error) {
	o, err := s.client.GetObject(ctx, s.cfg.Bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return nil, err
	}
	defer o.Close()
	return io.ReadAll(io.LimitReader(o, 1<<20))
}

// startupError turns a failed start-up check into one line naming the
// setting to fix.
func (s *Store) startupError(what string, err error) error {
	cfg := s.cfg
	resp := minio.ToErrorResponse(err)
	switch {
	case isNetwork(err):
		return fmt.Errorf("%s: endpoint %s unreachable within %s (%s): %v", Setting, cfg.Endpoint, cfg.Timeout, what, oneLine(err))
	case credentialCodes[resp.Code]:
		return fmt.Errorf("%s: %s rejected the credentials in AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (%s): %s", Setting, cfg.Endpoint, resp.Code, oneLine(err))
	case resp.StatusCode == http.StatusForbidden && strings.HasPrefix(what, "write") || resp.Code == "AccessDenied" && strings.HasPrefix(what, "write"):
		return fmt.Errorf("%s: no write permission on %s: %s was refused (%s): the keys need PutObject, GetObject, DeleteObject and ListBucket on the prefix", Setting, cfg, what, resp.Code)
	case resp.StatusCode == http.StatusForbidden:
		return fmt.Errorf("%s: access denied on %s (%s, %s): the keys need PutObject, GetObject, DeleteObject and ListBucket on the prefix", Setting, cfg, what, resp.Code)
	case resp.Code == "NoSuchBucket":
		return fmt.Errorf("%s: bucket %q does not exist at %s: create it or fix the URL", Setting, cfg.Bucket, cfg.Endpoint)
	case resp.StatusCode >= 500:
		return fmt.Errorf("%s: %s answered %d %s (%s): the object store is not healthy", Setting, cfg.Endpoint, resp.StatusCode, resp.Code, what)
	}
	return fmt.Errorf("%s: %s on %s failed: %v", Setting, what, cfg, oneLine(err))
}

// credentialCodes are the S3 error codes of refused keys (AWS's, and
// versitygw's for an unknown access key).
var credentialCodes = map[string]bool{
	"InvalidAccessKeyId": true, "SignatureDoesNotMatch": true, "InvalidToken": true,
	"ExpiredToken": true, "InvalidClientTokenId": true, "XAdminUserNotFound": true,
}

func oneLine(err error) string {
	return strings.Join(strings.Fields(err.Error()), " ")
}

// isNetwork reports a transport-level failure: refused, reset, DNS,
// timeout, TLS.
func isNetwork(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	if minio.IsNetworkOrHostDown(err, false) {
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return true
	}
	return errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) && minio.ToErrorResponse(err).StatusCode == 0
}

// translate maps an S3 failure of op to a lockstep error: network errors
// and 5xx → unavailable, 404 → not_found, 403 → permission_denied.
// Anything else stays internal (wrapped, so the cause is logged).
func (s *Store) translate(op string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) {
		return fmt.Errorf("%s: %w", op, err)
	}
	resp := minio.ToErrorResponse(err)
	switch {
	case resp.StatusCode == http.StatusNotFound || resp.Code == "NoSuchKey" || resp.Code == "NoSuchBucket":
		return lockstep.Errorf(lockstep.ENOTFOUND, "object store: %s: not found", op)
	case resp.StatusCode == http.StatusForbidden:
		return lockstep.E("s3packs.Store", lockstep.EFORBIDDEN, fmt.Sprintf("object store: %s: access denied (%s); check the permissions of AWS_ACCESS_KEY_ID on bucket %s", op, resp.Code, s.cfg.Bucket), err)
	case resp.StatusCode >= 500:
		return lockstep.E("s3packs.Store", lockstep.EUNAVAILABLE, fmt.Sprintf("object store: %s: server error %d %s", op, resp.StatusCode, resp.Code), err)
	case resp.StatusCode == 0 && isNetwork(err):
		// The endpoint (host, port) stays in the log: clients see that
		// the object store did not answer, not where it is.
		return lockstep.E("s3packs.Store", lockstep.EUNAVAILABLE, fmt.Sprintf("object store: %s: unreachable or not answering", op), err)
	}
	return fmt.Errorf("object store: %s: %w", op, err)
}

// key returns the object key of name under the prefix.
func (s *Store) key(name string) string {
	if s.cfg.Prefix == "" {
		return name
	}
	return s.cfg.Prefix + "/" + name
}

// networkDir is the key prefix of a network's packs.
func (s *Store) networkDir(network string) string {
	return s.key("networks/" + network + "/")
}

// checkNetwork refuses network names that could escape their key prefix.
func checkNetwork(network string) error { return bucket.CheckNetwork(network) }

func (s *Store) packKeys(network, h string) (string, string, error) {
	if err := checkNetwork(network); err != nil {
		return "", "", err
	}
	if err := lockstep.CheckPackHash(h); err != nil {
		return "", "", err
	}
	base := s.networkDir(network) + "pack-" + h
	return base + ".pack", base + ".idx", nil
}

// PutPack uploads the pack file at packPath and its index at idxPath as
// pack-<hash>.pack and pack-<hash>.idx of network, streaming both from
// disk. hash must be the pack's checksum (its last 20 bytes), which is
// checked. Pack and index are uploaded concurrently, each written once
// with If-None-Match: * (a pack already stored under its hash holds the
// same bytes and is left as it is). Returns invalid_argument if the files
// do not match hash, unavailable if the store cannot be reached,
// permission_denied if it refuses the write.
func (s *Store) PutPack(ctx context.Context, network, h, packPath, idxPath string) error {
	packKey, idxKey, err := s.packKeys(network, h)
	if err != nil {
		return err
	}
	// Both at once: one round trip of latency instead of two. Which of
	// the two a crash leaves does not matter: until the pack is
	// registered in the metadata database it is garbage either way.
	errc := make(chan error, 1)
	go func() { errc <- s.putFile(ctx, idxPath, idxKey, h, 40) }()
	err = s.putFile(ctx, packPath, packKey, h, 20)
	if ierr := <-errc; err == nil {
		err = ierr
	}
	return err
}

func (s *Store) putFile(ctx context.Context, path, key, h string, trailer int) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("put %s: %w", key, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("put %s: %w", key, err)
	}
	if fi.Size() < int64(trailer)+12 {
		return lockstep.Errorf(lockstep.EINVALID, "put %s: %s is too short to be a pack or index", key, path)
	}
	var sum [20]byte
	if _, err := f.ReadAt(sum[:], fi.Size()-int64(trailer)); err != nil {
		return fmt.Errorf("put %s: %w", key, err)
	}
	if hex.EncodeToString(sum[:]) != h {
		return lockstep.Errorf(lockstep.EINVALID, "put %s: %s names pack %s, not %s", key, path, hex.EncodeToString(sum[:]), h)
	}
	opts := minio.PutObjectOptions{
		ContentType: "application/x-git-packed-objects",
		PartSize:    partSize,
		NumThreads:  partThreads,
	}
	opts.SetMatchETagExcept("*")
	_, err = s.client.PutObject(ctx, s.cfg.Bucket, key, f, fi.Size(), opts)
	if err != nil {
		resp := minio.ToErrorResponse(err)
		if resp.StatusCode == http.StatusPreconditionFailed || resp.Code == "PreconditionFailed" {
			return nil // already stored: same name, same bytes
		}
		return s.translate("put "+key, err)
	}
	return nil
}

// GetPack downloads pack-<hash>.pack and .idx of network into packPath
// and idxPath, streaming each to a temporary file beside its destination,
// checking its size and checksums (the pack's SHA-1 trailer must equal
// hash; the index must name that pack and match its own trailer), fsyncing
// it and renaming it into place. Returns not_found if either is missing,
// invalid_argument (nothing written) if the bytes do not match the name,
// unavailable if the store cannot be reached.
func (s *Store) GetPack(ctx context.Context, network, h, packPath, idxPath string) error {
	packKey, idxKey, err := s.packKeys(network, h)
	if err != nil {
		return err
	}
	want, _ := hex.DecodeString(h)
	// Both at once; the index reaches its name only after the pack did
	// (a reader takes a pack as present once its index is).
	tmpIdx := filepath.Join(filepath.Dir(idxPath), ".tmp_get-"+filepath.Base(idxPath))
	errc := make(chan error, 1)
	go func() {
		errc <- s.getFile(ctx, idxKey, tmpIdx, func(tail []byte, sum []byte) bool {
			return bytes.Equal(tail[20:], sum) && bytes.Equal(tail[:20], want)
		})
	}()
	err = s.getFile(ctx, packKey, packPath, func(tail []byte, sum []byte) bool {
		return bytes.Equal(tail[20:], sum) && bytes.Equal(sum, want)
	})
	ierr := <-errc
	if err == nil {
		err = ierr
	}
	if err != nil {
		os.Remove(tmpIdx)
		return err
	}
	if err := os.Rename(tmpIdx, idxPath); err != nil {
		os.Remove(tmpIdx)
		return fmt.Errorf("get %s: %w", idxKey, err)
	}
	return nil
}

func (s *Store) getFile(ctx context.Context, key, dst string, ok func(tail, sum []byte) bool) error {
	o, err := s.client.GetObject(ctx, s.cfg.Bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return s.translate("get "+key, err)
	}
	defer o.Close()
	info, err := o.Stat()
	if err != nil {
		return s.translate("get "+key, err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".tmp_s3get_")
	if err != nil {
		return fmt.Errorf("get %s: %w", key, err)
	}
	defer func() {
		if tmp != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	tw := &tailHash{h: sha1.New()}
	n, err := io.Copy(io.MultiWriter(tmp, tw), o)
	if err != nil {
		return s.translate("get "+key, err)
	}
	if n != info.Size {
		return lockstep.Errorf(lockstep.EINVALID, "get %s: %d bytes read, the store says %d", key, n, info.Size)
	}
	if n < 40 || !ok(tw.tail[:], tw.sum()) {
		return lockstep.Errorf(lockstep.EINVALID, "get %s: content does not match its name (corrupt object)", key)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("get %s: %w", key, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("get %s: %w", key, err)
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return fmt.Errorf("get %s: %w", key, err)
	}
	tmp = nil
	if d, err := os.Open(filepath.Dir(dst)); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

// tailHash hashes everything written except the last 20 bytes and keeps
// the last 40 (a pack ends with its SHA-1; an index with the pack's SHA-1
// and then its own).
type tailHash struct {
	h    hash.Hash
	tail [40]byte
	n    int // bytes in tail
}

func (t *tailHash) Write(p []byte) (int, error) {
	total := len(p)
	buf := append(t.tail[:t.n:t.n], p...)
	if len(buf) > 40 {
		// Everything before the last 40 bytes is never part of the
		// trailer; of the last 40, the first 20 are hashed at sum time.
		t.h.Write(buf[:len(buf)-40])
		buf = buf[len(buf)-40:]
	}
	t.n = copy(t.tail[:], buf)
	return total, nil
}

// sum returns the SHA-1 of everything but the last 20 bytes, and leaves
// tail holding the last 40 bytes. Call once, after the last Write.
func (t *tailHash) sum() []byte {
	if t.n > 20 {
		t.h.Write(t.tail[:t.n-20])
	}
	return t.h.Sum(nil)
}

// PackInfo describes a stored pack (bucket.PackInfo).
type PackInfo = bucket.PackInfo

// ListPacks lists the packs of network stored in the bucket, sorted by
// hash, including incomplete ones. The metadata database's pack list is
// the truth about which packs are live; this is for garbage collection.
func (s *Store) ListPacks(ctx context.Context, network string) ([]PackInfo, error) {
	if err := checkNetwork(network); err != nil {
		return nil, err
	}
	dir := s.networkDir(network)
	byHash := map[string]*PackInfo{}
	var order []string
	for obj := range s.client.ListObjects(ctx, s.cfg.Bucket, minio.ListObjectsOptions{Prefix: dir, Recursive: true}) {
		if obj.Err != nil {
			return nil, s.translate("list "+dir, obj.Err)
		}
		name := strings.TrimPrefix(obj.Key, dir)
		h, ext, found := strings.Cut(strings.TrimPrefix(name, "pack-"), ".")
		if !found || !strings.HasPrefix(name, "pack-") || lockstep.CheckPackHash(h) != nil || (ext != "pack" && ext != "idx") {
			continue
		}
		p := byHash[h]
		if p == nil {
			p = &PackInfo{Hash: h}
			byHash[h] = p
			order = append(order, h)
		}
		if ext == "pack" {
			p.PackSize = obj.Size
		} else {
			p.IdxSize = obj.Size
		}
		if obj.LastModified.After(p.Modified) {
			p.Modified = obj.LastModified
		}
	}
	out := make([]PackInfo, 0, len(order))
	for _, h := range order {
		out = append(out, *byHash[h])
	}
	bucket.SortPacks(out)
	return out, nil
}

// DeletePack deletes pack-<hash>.idx then pack-<hash>.pack of network
// (the index first, so a half-deleted pack is listed as incomplete).
// Deleting a pack that is not there succeeds (S3 semantics).
func (s *Store) DeletePack(ctx context.Context, network, h string) error {
	packKey, idxKey, err := s.packKeys(network, h)
	if err != nil {
		return err
	}
	for _, k := range []string{idxKey, packKey} {
		if err := s.client.RemoveObject(ctx, s.cfg.Bucket, k, minio.RemoveObjectOptions{}); err != nil {
			return s.translate("delete "+k, err)
		}
	}
	return nil
}

// ListNetworks lists the networks that have objects in the bucket, by
// name (GC also visits networks whose only packs were never registered).
func (s *Store) ListNetworks(ctx context.Context) ([]string, error) {
	dir := s.key("networks/")
	var out []string
	for obj := range s.client.ListObjects(ctx, s.cfg.Bucket, minio.ListObjectsOptions{Prefix: dir}) {
		if obj.Err != nil {
			return nil, s.translate("list "+dir, obj.Err)
		}
		name := strings.TrimSuffix(strings.TrimPrefix(obj.Key, dir), "/")
		if checkNetwork(name) == nil && strings.HasSuffix(obj.Key, "/") {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out, nil
}

// Ping checks that the bucket answers (one HEAD request), for /readyz.
func (s *Store) Ping(ctx context.Context) error {
	ok, err := s.client.BucketExists(ctx, s.cfg.Bucket)
	if err != nil {
		return s.translate("ping", err)
	}
	if !ok {
		return lockstep.Errorf(lockstep.EUNAVAILABLE, "bucket %s does not exist", s.cfg.Bucket)
	}
	return nil
}
