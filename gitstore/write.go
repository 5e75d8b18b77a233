package gitstore

import (
	"bufio"
	"bytes"
	"crypto/sha1"
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/klauspost/compress/zlib"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sync"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/idxfile"
	"github.com/go-git/go-git/v5/plumbing/format/objfile"
)

// packCompression is the zlib level of pack entries. Level 1 is ~3x faster
// than the default for a few percent more bytes; git reads any level.
const packCompression = zlib.BestSpeed

// WriteObjects stores objs, skipping those already stored, as one packfile
// plus its .idx (never loose objects). When Options.Fsync is set, pack,
// index and the pack directory are fsynced before it returns, so the
// caller can move a ref to them afterwards. Delta objects are refused,
// and so is any batch checkWrite refuses (invalid_argument; nothing is
// written then).
func (n *Network) WriteObjects(objs []plumbing.EncodedObject) (WriteStats, error) {
	if err := n.checkWrite(objs); err != nil {
		return WriteStats{}, err
	}
	n.writeMu.Lock()
	defer n.writeMu.Unlock()

	todo := make([]plumbing.EncodedObject, 0, len(objs))
	seen := make(map[plumbing.Hash]bool, len(objs))
	for _, o := range objs {
		if o.Type() < plumbing.CommitObject || o.Type() > plumbing.TagObject {
			return WriteStats{}, fmt.Errorf("write objects: cannot store a %s object", o.Type())
		}
		h := o.Hash()
		if seen[h] || n.has1(h) { // under writeMu: no reload
			continue
		}
		seen[h] = true
		todo = append(todo, o)
	}
	if len(todo) == 0 {
		return WriteStats{}, nil
	}
	st, p, err := n.writePack(todo)
	if err != nil {
		return WriteStats{}, diskError(fmt.Errorf("write objects: %w", err))
	}
	if err := n.packHook(p.hash, st.Objects); err != nil {
		p.close()
		return WriteStats{}, err
	}
	if err := n.publish(p); err != nil {
		return WriteStats{}, diskError(fmt.Errorf("write objects: %w", err))
	}
	return st, nil
}

// checkWrite is the content check of every object our own code writes
// (WriteObjects: tar pushes, edits, merges; writeLoose: WriteCommit for
// pushes, rollbacks and checkpoint restores, Objects().SetEncodedObject),
// and it is the one ReceivePack applies to a pushed pack
// (validateObjects): canonical trees whose names pass ValidatePath's
// component rules (".git" and its aliases, at most MaxNameBytes bytes),
// .gitmodules and .gitattributes content git fsck accepts, relative
// symlinks that stay inside every root, well-formed commits and tags
// whose trees and parents exist. A commit's tree is checked whole, stored
// subtrees included (CheckRootTree, cached): a rollback to a tree stored
// before these rules is refused like an upload of it. Blobs alone are
// not checked (what they are depends on the tree naming them).
// Errors: invalid_argument naming the object and the rule; unavailable
// when a stored object the batch names is gone (an object GC dropped it
// during the request: retry).
func (n *Network) checkWrite(objs []plumbing.EncodedObject) error {
	ov := &overlay{n: n, objs: make(map[plumbing.Hash]plumbing.EncodedObject, len(objs)), storedExist: true}
	structural := false
	for _, o := range objs {
		h := o.Hash()
		if _, dup := ov.objs[h]; dup {
			continue
		}
		ov.objs[h] = o
		if o.Type() != plumbing.BlobObject {
			structural = true
			ov.order = append(ov.order, o)
		}
	}
	if !structural {
		return nil
	}
	return n.validateObjects(ov)
}

// packEntry is one compressed pack entry.
type packEntry struct {
	hash  plumbing.Hash
	data  []byte       // header + zlib stream
	spool *spooledBlob // or: the entry is ready-made in a spool file
	err   error
}

// writePack writes objs as one pack and index and opens the result.
func (n *Network) writePack(objs []plumbing.EncodedObject) (WriteStats, *pack, error) {
	entries := make([]packEntry, len(objs))
	compressAll(objs, entries)
	for _, e := range entries {
		if e.err != nil {
			return WriteStats{}, nil, e.err
		}
	}

	packDir := filepath.Join(n.dir, "objects", "pack")
	tmp, err := os.CreateTemp(packDir, "tmp_pack_")
	if err != nil {
		return WriteStats{}, nil, err
	}
	tmpName := tmp.Name()
	defer func() {
		if tmp != nil {
			tmp.Close()
			os.Remove(tmpName)
		}
	}()

	sum := sha1.New()
	bw := bufio.NewWriterSize(io.MultiWriter(tmp, sum), 1<<16)
	var hdr [12]byte
	copy(hdr[:], "PACK")
	binary.BigEndian.PutUint32(hdr[4:], 2)
	binary.BigEndian.PutUint32(hdr[8:], uint32(len(entries)))
	bw.Write(hdr[:])
	iw := new(idxfile.Writer)
	iw.OnHeader(uint32(len(entries)))
	off := int64(len(hdr))
	for _, e := range entries {
		if e.spool != nil {
			r, err := e.spool.entry()
			if err != nil {
				return WriteStats{}, nil, err
			}
			iw.Add(e.hash, uint64(off), e.spool.crc)
			if _, err := io.Copy(bw, r); err != nil {
				return WriteStats{}, nil, err
			}
			off += e.spool.n
			continue
		}
		iw.Add(e.hash, uint64(off), crc32.ChecksumIEEE(e.data))
		if _, err := bw.Write(e.data); err != nil {
			return WriteStats{}, nil, err
		}
		off += int64(len(e.data))
	}
	if err := bw.Flush(); err != nil {
		return WriteStats{}, nil, err
	}
	var checksum plumbing.Hash
	copy(checksum[:], sum.Sum(nil))
	if _, err := tmp.Write(checksum[:]); err != nil {
		return WriteStats{}, nil, err
	}
	packBytes := off + int64(len(checksum))
	if err := iw.OnFooter(checksum); err != nil {
		return WriteStats{}, nil, err
	}
	idx, err := iw.Index()
	if err != nil {
		return WriteStats{}, nil, err
	}
	var ib bytes.Buffer
	if _, err := idxfile.NewEncoder(&ib).Encode(idx); err != nil {
		return WriteStats{}, nil, err
	}
	if n.opts.Fsync {
		if err := tmp.Sync(); err != nil {
			return WriteStats{}, nil, err
		}
	}
	if err := tmp.Close(); err != nil {
		return WriteStats{}, nil, err
	}
	packPath := n.packPath(checksum, "pack")
	if err := os.Rename(tmpName, packPath); err != nil {
		return WriteStats{}, nil, err
	}
	tmp = nil
	os.Chmod(packPath, 0o400) // read-only, the owner's only (as the data directory's files)
	// Index last: git and Reload consider a pack present once its .idx is.
	if err := n.writeFileAtomicMode(n.packPath(checksum, "idx"), "", ib.Bytes(), 0o400, false); err != nil {
		return WriteStats{}, nil, err
	}
	if n.opts.Fsync {
		if err := syncDir(packDir); err != nil {
			return WriteStats{}, nil, err
		}
	}
	p, err := n.newPack(checksum, idx)
	if err != nil {
		return WriteStats{}, nil, err
	}
	return WriteStats{Objects: len(entries), Bytes: packBytes + int64(ib.Len())}, p, nil
}

// compressAll fills entries[i] with the pack entry of objs[i], using all
// CPUs: zlib is the dominant cost of a pack write.
func compressAll(objs []plumbing.EncodedObject, entries []packEntry) {
	workers := runtime.GOMAXPROCS(0)
	if workers > len(objs) {
		workers = len(objs)
	}
	var next sync.Mutex
	i := 0
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			zw, _ := zlib.NewWriterLevel(io.Discard, packCompression)
			var buf bytes.Buffer
			for {
				next.Lock()
				k := i
				i++
				next.Unlock()
				if k >= len(objs) {
					return
				}
				entries[k] = compressEntry(objs[k], zw, &buf)
			}
		}()
	}
	wg.Wait()
}

func compressEntry(o plumbing.EncodedObject, zw *zlib.Writer, buf *bytes.Buffer) packEntry {
	if sb, ok := o.(*spooledBlob); ok {
		return packEntry{hash: sb.hash, spool: sb} // compressed already
	}
	e := packEntry{hash: o.Hash()}
	buf.Reset()
	// Entry header: type and size, little-endian base-128.
	sz := o.Size()
	b := byte(o.Type())<<4 | byte(sz&0x0f)
	sz >>= 4
	for sz != 0 {
		buf.WriteByte(b | 0x80)
		b = byte(sz & 0x7f)
		sz >>= 7
	}
	buf.WriteByte(b)
	zw.Reset(buf)
	r, err := o.Reader()
	if err != nil {
		e.err = err
		return e
	}
	n, err := io.Copy(zw, r)
	r.Close()
	if err == nil && n != o.Size() {
		err = fmt.Errorf("object %s: read %d bytes, size says %d", e.hash, n, o.Size())
	}
	if err == nil {
		err = zw.Close()
	}
	if err != nil {
		e.err = err
		return e
	}
	e.data = bytes.Clone(buf.Bytes())
	return e
}

// writeLoose stores o as a loose object (zlib, temp file, fsync, rename)
// unless it is already stored.
func (n *Network) writeLoose(o plumbing.EncodedObject) (WriteStats, error) {
	h := o.Hash()
	if n.has(h) {
		return WriteStats{}, nil
	}
	if err := n.checkWrite([]plumbing.EncodedObject{o}); err != nil {
		return WriteStats{}, err
	}
	if n.opts.OnPack != nil {
		// Every object must reach OnPack: a one-object pack.
		return n.WriteObjects([]plumbing.EncodedObject{o})
	}
	var buf bytes.Buffer
	w := objfile.NewWriter(&buf)
	if err := w.WriteHeader(o.Type(), o.Size()); err != nil {
		return WriteStats{}, err
	}
	r, err := o.Reader()
	if err != nil {
		return WriteStats{}, err
	}
	_, err = io.Copy(w, r)
	r.Close()
	if err == nil {
		err = w.Close()
	}
	if err != nil {
		return WriteStats{}, fmt.Errorf("write object %s: %w", h, err)
	}
	if w.Hash() != h {
		return WriteStats{}, fmt.Errorf("write object %s: content hashes to %s", h, w.Hash())
	}
	path := n.loosePath(h)
	dir := filepath.Dir(path)
	for attempt := 0; ; attempt++ {
		if _, err := os.Stat(dir); os.IsNotExist(err) {
			if err := os.Mkdir(dir, 0o755); err != nil && !os.IsExist(err) {
				return WriteStats{}, diskError(err)
			}
			if n.opts.Fsync {
				if err := syncDir(filepath.Dir(dir)); err != nil {
					return WriteStats{}, err
				}
			}
		}
		if n.beforeLooseRename != nil {
			n.beforeLooseRename(dir)
		}
		// The temp file lives in objects/ (same filesystem), where Open can
		// find and remove what a crash leaves behind.
		err := n.writeFileAtomicMode(path, filepath.Join(n.dir, "objects"), buf.Bytes(), 0o400, n.opts.Fsync)
		if err != nil && errors.Is(err, fs.ErrNotExist) && attempt < 8 {
			// A compaction's `git prune-packed` removed the (empty)
			// fan-out directory between our mkdir and the rename: again.
			continue
		}
		if err != nil {
			return WriteStats{}, diskError(fmt.Errorf("write object %s: %w", h, err))
		}
		return WriteStats{Objects: 1, Bytes: int64(buf.Len())}, nil
	}
}

// writeFileAtomic writes data to path via a temp file in the same
// directory and a rename, fsyncing file and directory when Options.Fsync.
func (n *Network) writeFileAtomic(path string, data []byte) error {
	return n.writeFileAtomicMode(path, "", data, 0o600, n.opts.Fsync)
}

// writeFileAtomicMode writes data to a temp file in tmpDir (default: the
// directory of path), fsyncs it when Options.Fsync, renames it to path and,
// when syncDirToo, fsyncs path's directory.
func (n *Network) writeFileAtomicMode(path, tmpDir string, data []byte, mode os.FileMode, syncDirToo bool) error {
	dir := filepath.Dir(path)
	if tmpDir == "" {
		tmpDir = dir
	}
	f, err := os.CreateTemp(tmpDir, tmpPrefix+filepath.Base(path)+"_")
	if err != nil {
		return err
	}
	tmp := f.Name()
	ok := false
	defer func() {
		if !ok {
			f.Close()
			os.Remove(tmp)
		}
	}()
	if _, err := f.Write(data); err != nil {
		return err
	}
	if n.opts.Fsync {
		if err := f.Sync(); err != nil {
			return err
		}
	}
	if err := f.Chmod(mode); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	ok = true
	if syncDirToo && n.opts.Fsync {
		return syncDir(dir)
	}
	return nil
}

// tmpPrefix starts the names of our temp files (packs use git's tmp_pack_).
const tmpPrefix = ".tmp_"

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
