package gitstore

import (
	"fmt"
	"io"
	"os"
	"sort"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/idxfile"
)

// packTable is what prescan learned of each object of a received pack,
// in pack order: its offset, its type in the pack, its size (a delta's
// result size) and its delta base. With the .idx git index-pack wrote
// (each object's id and offset), it lists the quarantined pack's objects
// with their types and sizes (listQuarantine) without running `git
// cat-file --batch-all-objects --batch-check`, which had to wait for
// index-pack and then walked every delta chain again. The table is
// built from the very bytes index-pack was given (the gate passes on
// exactly what prescan consumed), so both see the same objects at the
// same offsets; a delta's type is its base's, as in git.
type packTable struct {
	objs []packObject
	refs map[int32]plumbing.Hash // a REF delta's base id, by its index in objs
	end  int64                   // where the objects end: the trailer
}

type packObject struct {
	off  int64
	size int64 // declared size; a delta's: its result's (delta header)
	// base: an OFS delta's base, its index in objs (-1: no object
	// starts at its offset; index-pack refuses such a pack).
	base int32
	typ  plumbing.ObjectType
}

// deltaBase is an OFS delta's base offset or a REF delta's base id, as
// prescanObjectHeader reads them.
type deltaBase struct {
	offset int64
	id     plumbing.Hash
}

func (t *packTable) reset(count uint32) {
	t.objs = make([]packObject, 0, min(count, 1<<16))
	t.refs = nil
	t.end = 0
}

// add records the object at off (objects are added in pack order).
func (t *packTable) add(off int64, typ plumbing.ObjectType, size int64, b deltaBase) {
	o := packObject{off: off, size: size, typ: typ, base: -1}
	switch typ {
	case plumbing.OFSDeltaObject:
		if i, ok := t.at(b.offset); ok {
			o.base = int32(i)
		}
	case plumbing.REFDeltaObject:
		if t.refs == nil {
			t.refs = map[int32]plumbing.Hash{}
		}
		t.refs[int32(len(t.objs))] = b.id
	}
	t.objs = append(t.objs, o)
}

// at returns the index of the object starting at off.
func (t *packTable) at(off int64) (int, bool) {
	i := sort.Search(len(t.objs), func(i int) bool { return t.objs[i].off >= off })
	return i, i < len(t.objs) && t.objs[i].off == off
}

// listedObject is an object of a quarantined pack as listQuarantine
// lists it.
type listedObject struct {
	h    plumbing.Hash
	t    plumbing.ObjectType
	size int64
	// appended: not sent, appended by index-pack --fix-thin (a stored
	// base of a thin pack).
	appended bool
}

// listQuarantine lists the objects of the pack at packPath, indexed in
// idx, in pack order, with the types and sizes `git cat-file
// --batch-check` reports: from t for the objects prescan parsed, from
// the pack's own object header for those index-pack appended after them
// (--fix-thin: the stored bases of a thin pack, never deltas).
func (t *packTable) listQuarantine(idx *idxfile.MemoryIndex, packPath string) ([]listedObject, error) {
	iter, err := idx.EntriesByOffset()
	if err != nil {
		return nil, err
	}
	defer iter.Close()
	var pack *os.File
	defer func() {
		if pack != nil {
			pack.Close()
		}
	}()
	header := func(off int64) (plumbing.ObjectType, int64, error) {
		if pack == nil {
			if pack, err = os.Open(packPath); err != nil {
				return 0, 0, err
			}
		}
		return packObjectHeaderAt(pack, off)
	}
	types := make([]plumbing.ObjectType, len(t.objs)) // resolved, by index
	var chain []int
	// typeOf is the type of the object at index i: a delta's is its
	// base's, down its chain (OFS bases come before a delta; a REF
	// base is found by its id in idx, in the table or appended).
	typeOf := func(i int) (plumbing.ObjectType, error) {
		chain = chain[:0]
		var typ plumbing.ObjectType
		for cur := i; typ == 0; {
			switch o := &t.objs[cur]; {
			case types[cur] != 0:
				typ = types[cur]
			case !o.typ.IsDelta():
				if typ = o.typ; typ == plumbing.InvalidObject {
					return 0, fmt.Errorf("object at %d: invalid type", o.off)
				}
			case len(chain) > len(t.objs):
				return 0, fmt.Errorf("object at %d: delta chain loops", t.objs[i].off)
			case o.typ == plumbing.OFSDeltaObject:
				if o.base < 0 {
					return 0, fmt.Errorf("object at %d: no object at its delta base", o.off)
				}
				chain = append(chain, cur)
				cur = int(o.base)
			default:
				chain = append(chain, cur)
				off, err := idx.FindOffset(t.refs[int32(cur)])
				if err != nil {
					return 0, fmt.Errorf("object at %d: delta base %s: %w", o.off, t.refs[int32(cur)], err)
				}
				j, ok := t.at(off)
				if !ok {
					if typ, _, err = header(off); err != nil || typ == plumbing.InvalidObject {
						return 0, fmt.Errorf("object at %d: delta base %s at %d: bad header (%v)", o.off, t.refs[int32(cur)], off, err)
					}
					break
				}
				cur = j
			}
		}
		for _, c := range chain {
			types[c] = typ
		}
		types[i] = typ
		return typ, nil
	}
	count, _ := idx.Count()
	out := make([]listedObject, 0, count)
	j := 0
	for {
		e, err := iter.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		off := int64(e.Offset)
		for j < len(t.objs) && t.objs[j].off < off {
			j++ // an object sent twice: indexed once
		}
		l := listedObject{h: e.Hash}
		if j < len(t.objs) && t.objs[j].off == off {
			if l.t, err = typeOf(j); err != nil {
				return nil, err
			}
			l.size = t.objs[j].size
		} else if l.t, l.size, err = header(off); err != nil {
			return nil, fmt.Errorf("object %s at %d: %w", e.Hash, off, err)
		} else {
			l.appended = true
		}
		if l.t.IsDelta() {
			return nil, fmt.Errorf("object %s at %d: unexpected delta", e.Hash, off)
		}
		out = append(out, l)
	}
	return out, nil
}

// packObjectHeaderAt reads the type and size of the object at off in a
// pack file (for a delta: its own type and the delta's size).
func packObjectHeaderAt(f io.ReaderAt, off int64) (plumbing.ObjectType, int64, error) {
	var b [16]byte
	k, err := f.ReadAt(b[:], off)
	if k == 0 && err != nil {
		return 0, 0, err
	}
	c := b[0]
	typ := plumbing.ObjectType((c & 0x70) >> 4)
	size := int64(c & 0x0f)
	shift := uint(4)
	for i := 1; c&0x80 != 0; i++ {
		if i >= k || shift > 64-7 {
			return 0, 0, fmt.Errorf("bad object header")
		}
		c = b[i]
		size += int64(c&0x7f) << shift
		shift += 7
	}
	return typ, size, nil
}
