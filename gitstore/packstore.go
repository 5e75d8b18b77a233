package gitstore

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"unsafe"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/format/idxfile"
	"github.com/go-git/go-git/v5/plumbing/object"

	"github.com/lockstep-hq/lockstep"
)

// Received packs are stored as git stores them (issue #11): the client's
// pack is indexed by `git index-pack --fix-thin` into a quarantine object
// directory (thin-pack bases appended, deltas kept, an .idx written and
// fsynced), its new objects are read back with `git cat-file --batch` and
// validated (validateObjects), and only then is the pack moved into
// objects/pack and published. A refused pack never reaches objects/pack.
//
//	objects/tmp_objdir-lockstep-XXXX/pack/pack-<sha>.{pack,idx}   quarantine
//
// A quarantine left by a crash is removed by RemoveStaleTemps after the
// grace period, like git's own tmp_objdir-incoming-* directories.

// quarantinePrefix starts the name of a receive's quarantine directory
// under objects/ (git's receive-pack uses "tmp_objdir-incoming-").
const quarantinePrefix = "tmp_objdir-"

// maxSymlinkBytes bounds a symlink's target blob in a received pack: the
// target is read into memory to check it (PATH_MAX is 4096 on Linux).
const maxSymlinkBytes = 64 << 10

// quarantine is a received pack indexed but not yet published.
type quarantine struct {
	dir  string               // objects/tmp_objdir-lockstep-XXXX
	hash plumbing.Hash        // the pack's name (its checksum)
	tab  *packTable           // what prescan read of the pack
	idx  *idxfile.MemoryIndex // its .idx, once loadQuarantine read it
}

func (q *quarantine) path(ext string) string {
	return filepath.Join(q.dir, "pack", "pack-"+q.hash.String()+"."+ext)
}

// size is the bytes of the quarantined pack and its index.
func (q *quarantine) size() (int64, error) {
	var total int64
	for _, ext := range []string{"pack", "idx"} {
		fi, err := os.Stat(q.path(ext))
		if err != nil {
			return 0, fmt.Errorf("receive pack: %w", err)
		}
		total += fi.Size()
	}
	return total, nil
}

func (q *quarantine) remove() {
	if q != nil && q.dir != "" {
		os.RemoveAll(q.dir)
	}
}

// gitEnv is the environment of the git commands run on the network: the
// caller's without any GIT_* variable (a GIT_NAMESPACE or GIT_DIR of the
// serving process must not leak in), plus extra.
func gitEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GIT_") {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

// gitArgs prefixes args with the config every network git command runs
// with: no fsync when the network does not want it (tests), no
// auto-gc, no reverse index beside the pack (go-git does not read one).
func (n *Network) gitArgs(args ...string) []string {
	pre := []string{"-c", "gc.auto=0", "-c", "pack.writeReverseIndex=false"}
	if !n.opts.Fsync {
		pre = append(pre, "-c", "core.fsync=none")
	}
	return append(pre, args...)
}

// indexReceived runs `git index-pack --stdin --fix-thin` on the pack
// read from body, as it arrives, into a new quarantine directory, with
// the network's objects as alternates for the bases of a thin pack. The
// pack is fed to index-pack through prescan (see gate): index-pack gets
// each byte once prescan has consumed it (so both inflate at once, on two
// cores) and the 20-byte trailer only once prescan has accepted every
// object's declared size, so no delta is resolved, in this process or in
// git, before the limits are checked. Returns up's error (too_large over
// the upload limit, the reader's own), prescan's error (too_large,
// invalid_argument), invalid_argument for a corrupt pack or a delta whose
// base is neither in the pack nor stored.
func (n *Network) indexReceived(body io.Reader, up *uploadReader, lim Limits) (*quarantine, error) {
	objDir := filepath.Join(n.dir, "objects")
	dir, err := os.MkdirTemp(objDir, quarantinePrefix+"lockstep-")
	if err != nil {
		return nil, fmt.Errorf("receive pack: %w", err)
	}
	q := &quarantine{dir: dir, tab: &packTable{}}
	fail := func(err error) (*quarantine, error) { q.remove(); return nil, err }
	if err := os.Mkdir(filepath.Join(dir, "pack"), 0o755); err != nil {
		return fail(fmt.Errorf("receive pack: %w", err))
	}
	cmd := exec.Command("git", n.gitArgs("index-pack", "--stdin", "--fix-thin")...)
	cmd.Dir = n.dir
	cmd.Env = gitEnv("GIT_DIR="+n.dir, "GIT_OBJECT_DIRECTORY="+dir, "GIT_ALTERNATE_OBJECT_DIRECTORIES="+objDir)
	stdin, err := cmd.StdinPipe() // an OS pipe: writes fail, not block, once git exits
	if err != nil {
		return fail(fmt.Errorf("receive pack: %w", err))
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		return fail(fmt.Errorf("receive pack: git index-pack: %w", err))
	}

	feed := &feedWriter{w: stdin}
	bw := bufio.NewWriterSize(feed, 1<<16)
	scanErr := prescanGated(body, lim, &gate{w: bw}, q.tab)
	if scanErr == nil {
		if scanErr = bw.Flush(); scanErr != nil {
			scanErr = fmt.Errorf("receive pack: feed git index-pack: %w", scanErr)
		}
	}
	if up.err != nil {
		scanErr = up.err // over the upload limit, or the upload broke off
	}
	if scanErr != nil && (up.err != nil || lockstep.ErrorCode(scanErr) == lockstep.ETOOLARGE) {
		cmd.Process.Kill()
	}
	stdin.Close()
	waitErr := cmd.Wait()
	if scanErr != nil && (up.err != nil || lockstep.ErrorCode(scanErr) == lockstep.ETOOLARGE) {
		return fail(scanErr)
	}
	if waitErr != nil {
		var ee *exec.ExitError
		if !errors.As(waitErr, &ee) {
			return fail(fmt.Errorf("receive pack: git index-pack: %w", waitErr))
		}
		if scanErr != nil && feed.err == nil && lockstep.ErrorCode(scanErr) == lockstep.EINVALID {
			return fail(scanErr) // prescan's reason, unless git stopped reading first
		}
		msg := gitFatal(stderr.String())
		if strings.Contains(msg, "unresolved delta") {
			return fail(lockstep.Errorf(lockstep.EINVALID, "pack has a delta against an object that is neither in the pack nor stored"))
		}
		return fail(lockstep.Errorf(lockstep.EINVALID, "corrupt packfile: %s", msg))
	}
	if scanErr != nil {
		return fail(scanErr)
	}
	// index-pack prints "pack\t<sha>" (or "keep\t<sha>").
	out := strings.Fields(stdout.String())
	if len(out) == 0 || !plumbing.IsHash(out[len(out)-1]) {
		return fail(fmt.Errorf("receive pack: git index-pack printed %q", stdout.String()))
	}
	q.hash = plumbing.NewHash(out[len(out)-1])
	return q, nil
}

// gate passes a received pack on to git index-pack (w) no further than
// prescan has read it: a byte once prescan has consumed it (it belongs to
// an object header or to an object's deflate stream, which index-pack
// may parse and inflate), the rest (the trailer, and whatever follows
// it) only once prescan has accepted every object (finish). index-pack
// resolves deltas only after it has read the trailer, so none is
// resolved before prescan has checked every declared and delta-result
// size; and as the pack is never spooled, a prescan that reads ahead of
// what it consumed (its bufio.Reader) must not let git read ahead too:
// git would find the trailer there before prescan has checked the last
// objects. pending holds what was read but not passed on: at most
// prescan's read-ahead.
type gate struct {
	w       io.Writer
	pending []byte
	sent    int64 // offset in the pack of pending[0]: what was passed on
	err     error // the first write error (git exited)
}

// reader returns data read through g: every read first passes on what
// prescan has consumed (consumed: its offset in the pack).
func (g *gate) reader(data io.Reader, consumed func() int64) io.Reader {
	return &gateReader{g: g, r: data, consumed: consumed}
}

type gateReader struct {
	g        *gate
	r        io.Reader
	consumed func() int64
}

func (gr *gateReader) Read(p []byte) (int, error) {
	g := gr.g
	if err := g.release(gr.consumed()); err != nil {
		return 0, err
	}
	k, err := gr.r.Read(p)
	g.pending = append(g.pending, p[:k]...)
	return k, err
}

// release passes on the pack up to offset upTo.
func (g *gate) release(upTo int64) error {
	if g.err != nil {
		return g.err
	}
	if k := upTo - g.sent; k > 0 {
		if _, err := g.w.Write(g.pending[:k]); err != nil {
			g.err = fmt.Errorf("receive pack: feed git index-pack: %w", err)
			return g.err
		}
		g.pending = g.pending[:copy(g.pending, g.pending[k:])]
		g.sent = upTo
	}
	return nil
}

// finish passes on the rest of the pack once prescan has accepted its
// objects (end: where they end): what prescan read ahead, then the rest
// of gr's reader.
func (g *gate) finish(end int64, data io.Reader) error {
	if err := g.release(end); err != nil {
		return err
	}
	if _, err := g.w.Write(g.pending); err != nil {
		g.err = fmt.Errorf("receive pack: feed git index-pack: %w", err)
		return g.err
	}
	g.sent += int64(len(g.pending))
	g.pending = nil
	if _, err := io.Copy(g.w, data); err != nil {
		return fmt.Errorf("receive pack: feed git index-pack: %w", err)
	}
	return nil
}

// feedWriter remembers the first write error (git exited).
type feedWriter struct {
	w   io.Writer
	err error
}

func (f *feedWriter) Write(p []byte) (int, error) {
	if f.err != nil {
		return 0, f.err
	}
	k, err := f.w.Write(p)
	f.err = err
	return k, err
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	k, err := c.r.Read(p)
	c.n += int64(k)
	return k, err
}

// gitFatal returns the message of git's last "fatal:"/"error:" line.
func gitFatal(stderr string) string {
	msg := ""
	for _, l := range strings.Split(stderr, "\n") {
		l = strings.TrimSpace(l)
		for _, p := range []string{"fatal: ", "error: "} {
			if strings.HasPrefix(l, p) {
				msg = strings.TrimPrefix(l, p)
			}
		}
	}
	if msg == "" {
		msg = strings.Join(strings.Fields(stderr), " ")
	}
	return msg
}

// quarantinedObject is an object of a quarantined pack: its content when
// validation needs it (commits, trees, tags, and the blobs that are
// symlink targets, .gitmodules or .gitattributes), else type and size only.
type quarantinedObject struct {
	h    plumbing.Hash
	t    plumbing.ObjectType
	size int64
	data []byte // nil: content not loaded
	// queued: asked of cat-file for validation (a blob named by a
	// tree; set by loadQuarantine's reader only)
	queued bool

	// A tree's content decoded once, by loadQuarantine, for every later
	// reader (validateObjects, ascent): tree, or the error decoding gave.
	tree    *object.Tree
	treeErr error
}

// decodedTree returns o's tree, decoding it on first use.
func (o *quarantinedObject) decodedTree() (*object.Tree, error) {
	if o.tree == nil && o.treeErr == nil {
		o.tree, o.treeErr = decodeTree(o.h, o.data)
		if o.treeErr != nil {
			o.tree = nil
		}
	}
	return o.tree, o.treeErr
}

// decodeTree decodes the content of tree h as go-git's Tree.Decode does
// (the same entries, modes made canonical the same way, the same errors;
// TestDecodeTreeMatchesGoGit), straight from the bytes: Decode reads
// them through a bufio.Reader, a string per mode and per name, which was
// the larger part of loadQuarantine's CPU on a full-history push. Only
// Entries is set (the tree's lookups by name then search linearly).
func decodeTree(h plumbing.Hash, data []byte) (*object.Tree, error) {
	t := &object.Tree{Hash: h}
	if len(data) == 0 {
		return t, nil
	}
	n := 0
	for _, c := range data {
		if c == 0 {
			n++
		}
	}
	t.Entries = make([]object.TreeEntry, 0, n)
	for len(data) > 0 {
		sp := bytes.IndexByte(data, ' ')
		if sp < 0 {
			return nil, fmt.Errorf("%w: missing mode terminator", object.ErrMalformedTree)
		}
		mode, ok := octalMode(data[:sp])
		if !ok {
			return nil, fmt.Errorf("%w: malformed mode", object.ErrMalformedTree)
		}
		data = data[sp+1:]
		nul := bytes.IndexByte(data, 0)
		if nul < 0 {
			return nil, fmt.Errorf("%w: missing filename terminator", object.ErrMalformedTree)
		}
		if nul == 0 {
			return nil, fmt.Errorf("%w: empty filename", object.ErrMalformedTree)
		}
		// The name is a view of data, not a copy (a string each was
		// most of a receive's allocations): data, a quarantined tree's
		// content, is never written after cat-file filled it, and lives
		// as long as its tree. (ascent copies a name it keeps longer.)
		name := unsafe.String(&data[0], nul)
		data = data[nul+1:]
		if len(data) < len(plumbing.ZeroHash) {
			return nil, fmt.Errorf("%w: truncated object id", object.ErrMalformedTree)
		}
		var eh plumbing.Hash
		copy(eh[:], data)
		data = data[len(eh):]
		t.Entries = append(t.Entries, object.TreeEntry{Name: name, Mode: canonicalTreeMode(mode), Hash: eh})
	}
	return t, nil
}

// octalMode is filemode.New on bytes (strconv.ParseUint(s, 8, 32)):
// one or more octal digits, at most 32 bits.
func octalMode(b []byte) (filemode.FileMode, bool) {
	if len(b) == 0 {
		return 0, false
	}
	var v uint64
	for _, c := range b {
		if c < '0' || c > '7' {
			return 0, false
		}
		if v = v<<3 | uint64(c-'0'); v > 1<<32-1 {
			return 0, false
		}
	}
	return filemode.FileMode(v), true
}

// canonicalTreeMode is go-git's (object.canonicalTreeMode): what a tree
// entry's mode decodes to.
func canonicalTreeMode(mode filemode.FileMode) filemode.FileMode {
	switch mode & 0o170000 {
	case 0o040000:
		return filemode.Dir
	case 0o100000:
		if mode&0o111 != 0 {
			return filemode.Executable
		}
		return filemode.Regular
	case 0o120000:
		return filemode.Symlink
	default:
		return filemode.Submodule
	}
}

func (o *quarantinedObject) Hash() plumbing.Hash         { return o.h }
func (o *quarantinedObject) Type() plumbing.ObjectType   { return o.t }
func (o *quarantinedObject) SetType(plumbing.ObjectType) {}
func (o *quarantinedObject) Size() int64                 { return o.size }
func (o *quarantinedObject) SetSize(int64)               {}
func (o *quarantinedObject) Writer() (io.WriteCloser, error) {
	return nil, errors.New("read-only object")
}
func (o *quarantinedObject) Reader() (io.ReadCloser, error) {
	if o.data == nil && o.size > 0 {
		return nil, fmt.Errorf("object %s: content not loaded", o.h)
	}
	return io.NopCloser(bytes.NewReader(o.data)), nil
}

// loadQuarantine lists the objects of q's pack and returns an overlay
// holding those not already stored, in pack order, with the content
// validation needs. Limits are applied to the declared sizes again
// (prescan checked them from the raw pack).
//
// The list comes from the .idx index-pack wrote (ids and offsets) and
// prescan's table of the same pack (types and sizes; listQuarantine),
// so the content of every commit, tree and tag is asked of one `git
// cat-file --batch` at once, in pack order; the blobs validation reads
// (symlink targets, .gitmodules, .gitattributes) are asked of a second
// one as the trees naming them arrive. Every object read is checked to
// have the listed type and size.
func (n *Network) loadQuarantine(q *quarantine, lim Limits, present func(plumbing.Hash) bool) (*overlay, error) {
	env := gitEnv("GIT_DIR="+n.dir, "GIT_OBJECT_DIRECTORY="+q.dir)
	idx, err := readIdx(q.path("idx"))
	if err != nil {
		return nil, fmt.Errorf("receive pack: %w", err)
	}
	q.idx = idx
	listed, err := q.tab.listQuarantine(idx, q.path("pack"))
	if err != nil {
		return nil, fmt.Errorf("receive pack: list %s: %w", q.path("pack"), err)
	}
	ov := &overlay{n: n, objs: make(map[plumbing.Hash]plumbing.EncodedObject, len(listed)), order: make([]plumbing.EncodedObject, 0, len(listed)), lim: lim, present: present}
	var want []*quarantinedObject
	blobs := 0
	loose := n.looseFanout()
	for _, l := range listed {
		h := l.h
		stored := n.packFor(h) != nil || loose[h[0]] && n.has1(h)
		switch {
		case present != nil && l.appended:
			// A thin pack's base, which only a stored object can be
			// (index-pack appended it): the writer must be able to
			// name it, else the pack is refused as if it were absent.
			if !present(h) {
				return nil, lockstep.Errorf(lockstep.EINVALID, "pack has a delta against an object that is neither in the pack nor stored")
			}
			continue
		case stored && present == nil:
			continue // a thin pack's base, or sent again: stored and checked before
		case !stored:
			ov.fresh++
		}
		switch l.t {
		case plumbing.CommitObject, plumbing.TreeObject, plumbing.TagObject:
		case plumbing.BlobObject:
			if l.size > lim.MaxFileBytes {
				return nil, lockstep.Errorf(lockstep.ETOOLARGE, "blob %s is %d bytes, over the %d-byte limit (--max-file-bytes)", h, l.size, lim.MaxFileBytes)
			}
			blobs++
		default:
			return nil, invalidObject(h, "unexpected object type %s", l.t)
		}
		o := &quarantinedObject{h: h, t: l.t, size: l.size}
		ov.objs[h] = o
		ov.order = append(ov.order, o)
		if l.t != plumbing.BlobObject {
			want = append(want, o)
		}
	}
	if len(ov.order) == 0 {
		return ov, nil
	}
	feed := make(chan *quarantinedObject, len(want))
	for _, o := range want {
		feed <- o
	}
	close(feed)
	// The blobs whose content validateObjects reads: symlink targets and
	// .gitmodules / .gitattributes files named by the new trees, asked of
	// a second cat-file as each tree arrives (ov is no longer written:
	// read only here).
	var blobFeed chan *quarantinedObject
	var blobDone chan error
	var entryErr error
	catErr := n.catFileStream(env, feed, func(o *quarantinedObject) {
		if o.t != plumbing.TreeObject || entryErr != nil {
			return
		}
		t, err := o.decodedTree() // while git reads the next ones
		if err != nil {
			return // validateObjects reports it
		}
		for _, e := range t.Entries {
			b, ok := ov.objs[e.Hash].(*quarantinedObject)
			if !ok || b.t != plumbing.BlobObject || b.queued || b.size == 0 {
				continue
			}
			switch {
			case e.Mode == filemode.Symlink:
				if b.size > maxSymlinkBytes {
					entryErr = invalidObject(o.h, "symlink %q: target is %d bytes, over %d", e.Name, b.size, maxSymlinkBytes)
					return
				}
			case specialFile(e.Name) == ".gitmodules" && b.size <= maxGitmodulesBytes,
				specialFile(e.Name) == ".gitattributes" && b.size <= maxAttributesBytes:
			default:
				continue
			}
			b.queued = true
			if blobFeed == nil {
				blobFeed, blobDone = make(chan *quarantinedObject, blobs), make(chan error, 1)
				go func() { blobDone <- n.catFileStream(env, blobFeed, nil) }()
			}
			blobFeed <- b // never blocks: room for every blob
		}
	})
	var blobErr error
	if blobFeed != nil {
		close(blobFeed)
		blobErr = <-blobDone
	}
	if catErr != nil {
		return nil, catErr
	}
	if entryErr != nil {
		return nil, entryErr
	}
	if blobErr != nil {
		return nil, blobErr
	}
	return ov, nil
}

// readIdx decodes the pack index at path.
func readIdx(path string) (*idxfile.MemoryIndex, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	idx := idxfile.NewMemoryIndex()
	if err := idxfile.NewDecoder(bufio.NewReaderSize(f, 1<<16)).Decode(idx); err != nil {
		return nil, fmt.Errorf("decode %s: %w", path, err)
	}
	return idx, nil
}

// catFileHeader splits a line of cat-file's "%(objectname)
// %(objecttype) %(objectsize)" (--batch's header without its newline)
// in place: ok is false unless it has three fields and a hex object id.
func catFileHeader(line []byte) (h plumbing.Hash, typ, size []byte, ok bool) {
	id, rest, ok1 := bytes.Cut(line, []byte{' '})
	typ, size, ok2 := bytes.Cut(rest, []byte{' '})
	if !ok1 || !ok2 || len(id) != 2*len(h) || len(typ) == 0 || len(size) == 0 || bytes.IndexByte(size, ' ') >= 0 {
		return h, nil, nil, false
	}
	if _, err := hex.Decode(h[:], id); err != nil {
		return h, nil, nil, false
	}
	return h, typ, size, true
}

// objectType is plumbing.ParseObjectType on bytes (InvalidObject for
// an unknown name).
func objectType(name []byte) plumbing.ObjectType {
	switch string(name) {
	case "commit":
		return plumbing.CommitObject
	case "tree":
		return plumbing.TreeObject
	case "blob":
		return plumbing.BlobObject
	case "tag":
		return plumbing.TagObject
	}
	return plumbing.InvalidObject
}

// looseFanout reports which objects/XX directories of loose objects
// exist, read once per receive: an object whose directory is absent is
// not stored loose, and needs no stat (a full-history push into a
// network without loose objects otherwise stats every object). A
// directory created meanwhile only makes an object stored since then be
// validated as a new one. On an error reading objects/, every directory
// is reported present (has1 stats as before).
func (n *Network) looseFanout() *[256]bool {
	var fan [256]bool
	ents, err := os.ReadDir(filepath.Join(n.dir, "objects"))
	if err != nil {
		for i := range fan {
			fan[i] = true
		}
		return &fan
	}
	for _, e := range ents {
		if b, err := strconv.ParseUint(e.Name(), 16, 8); err == nil && len(e.Name()) == 2 {
			fan[b] = true
		}
	}
	return &fan
}

// catFileSlab is the size of the blocks catFileStream carves small
// objects' contents from.
const catFileSlab = 256 << 10

// catFileStream fills the content of the objects received from feed,
// until it is closed, with one `git cat-file --batch`, calling loaded (if
// not nil) on each once filled. feed is drained even on an error.
func (n *Network) catFileStream(env []string, feed <-chan *quarantinedObject, loaded func(*quarantinedObject)) error {
	drain := func() {
		for range feed {
		}
	}
	cmd := exec.Command("git", n.gitArgs("cat-file", "--batch", "--buffer")...)
	cmd.Dir, cmd.Env = n.dir, env
	stdin, err := cmd.StdinPipe()
	if err != nil {
		drain()
		return fmt.Errorf("receive pack: %w", err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		drain()
		return fmt.Errorf("receive pack: %w", err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		drain()
		return fmt.Errorf("receive pack: git cat-file: %w", err)
	}
	// The writer passes each object on to the reader once asked for, in
	// order; it flushes whenever feed has nothing ready, so git is never
	// left waiting on a buffered request.
	asked := make(chan *quarantinedObject, 1<<14)
	go func() {
		defer close(asked)
		bw := bufio.NewWriterSize(stdin, 1<<16)
		for {
			var o *quarantinedObject
			var ok bool
			select {
			case o, ok = <-feed:
			default:
				bw.Flush()
				o, ok = <-feed
			}
			if !ok {
				break
			}
			var line [2*len(plumbing.ZeroHash) + 1]byte
			hex.Encode(line[:], o.h[:])
			line[len(line)-1] = '\n'
			bw.Write(line[:])
			asked <- o
		}
		bw.Flush()
		stdin.Close()
	}()
	br := bufio.NewReaderSize(stdout, 1<<16)
	var slab []byte // the objects' contents, carved from shared blocks
	readErr := func() error {
		for o := range asked {
			hdr, err := br.ReadSlice('\n')
			if err != nil {
				return err
			}
			h, typ, sz, ok := catFileHeader(hdr[:len(hdr)-1])
			if !ok || h != o.h {
				return fmt.Errorf("unexpected header %q for %s", hdr, o.h)
			}
			if t := objectType(typ); t != o.t {
				return fmt.Errorf("object %s: type %s, listed as %s", o.h, typ, o.t)
			}
			size, err := strconv.ParseInt(string(sz), 10, 64)
			if err != nil || size != o.size {
				return fmt.Errorf("object %s: size %s, listed as %d", o.h, sz, o.size)
			}
			// Contents live as long as the receive: many small ones
			// share a block (one allocation, not one each).
			if size+1 > int64(len(slab)) {
				if size+1 > catFileSlab/4 {
					slab = make([]byte, size+1)
				} else {
					slab = make([]byte, catFileSlab)
				}
			}
			o.data, slab = slab[:size+1:size+1], slab[size+1:] // content + "\n"
			if _, err := io.ReadFull(br, o.data); err != nil {
				return err
			}
			o.data = o.data[:size]
			if loaded != nil {
				loaded(o)
			}
		}
		return nil
	}()
	if readErr != nil { // let the writer finish: git may be blocked writing its output
		discarded := make(chan struct{})
		go func() { io.Copy(io.Discard, br); close(discarded) }()
		for range asked {
		}
		<-discarded
	}
	io.Copy(io.Discard, br)
	waitErr := cmd.Wait()
	if readErr != nil {
		return fmt.Errorf("receive pack: git cat-file --batch: %v %s", readErr, gitFatal(stderr.String()))
	}
	if waitErr != nil {
		return fmt.Errorf("receive pack: git cat-file --batch: %v %s", waitErr, gitFatal(stderr.String()))
	}
	return nil
}

// publishReceived moves q's pack and index into objects/pack (pack first,
// index last: git and Reload see a pack once its .idx exists), fsyncs the
// directory when Options.Fsync (index-pack fsynced the files), and adds
// the pack to the Network. Returns the bytes stored.
func (n *Network) publishReceived(q *quarantine) (int64, error) {
	n.writeMu.Lock()
	defer n.writeMu.Unlock()
	var bytes int64
	for _, ext := range []string{"pack", "idx"} {
		fi, err := os.Stat(q.path(ext))
		if err != nil {
			return 0, diskError(fmt.Errorf("publish pack: %w", err))
		}
		bytes += fi.Size()
		if err := os.Rename(q.path(ext), n.packPath(q.hash, ext)); err != nil {
			return 0, diskError(fmt.Errorf("publish pack: %w", err))
		}
	}
	if n.opts.Fsync {
		if err := syncDir(filepath.Join(n.dir, "objects", "pack")); err != nil {
			return 0, diskError(fmt.Errorf("publish pack: %w", err))
		}
	}
	n.mu.RLock()
	for _, p := range n.packs {
		if p.hash == q.hash {
			n.mu.RUnlock()
			return bytes, nil // the same pack again: already loaded
		}
	}
	n.mu.RUnlock()
	var p *pack
	var err error
	if q.idx != nil {
		p, err = n.newPack(q.hash, q.idx) // the .idx loadQuarantine read
	} else {
		p, err = n.openPack(q.hash)
	}
	if err != nil {
		return 0, diskError(fmt.Errorf("publish pack: %w", err))
	}
	objects := 0
	if c, err := p.idx.Count(); err == nil {
		objects = int(c)
	}
	if err := n.packHook(q.hash, objects); err != nil {
		p.close()
		return 0, err
	}
	if err := n.publish(p); err != nil {
		return 0, diskError(fmt.Errorf("publish pack: %w", err))
	}
	return bytes, nil
}
