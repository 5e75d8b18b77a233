package merge

import (
	"sort"
	"sync"

	"github.com/lockstep-hq/lockstep/gitobj"
)

// Store is what the merge engine reads objects from and writes the
// objects it creates (merged blobs, trees, virtual merge bases) to: the
// three object methods of go-git's storer.EncodedObjectStorer it uses,
// in gitobj's types, so gitobj.Reader.Objects() (and go-git's own
// storers, in tests) are Stores. Implementations must be safe for
// concurrent use if the caller shares them between goroutines; the
// engine itself uses a Store from one goroutine per call.
//
// EncodedObject and HasEncodedObject return gitobj.ErrObjectNotFound for
// a missing object; the engine turns that into a lockstep not_found
// error. The engine builds the objects it writes itself
// (gitobj.NewObject, gitobj.EncodeCommit).
type Store interface {
	EncodedObject(gitobj.ObjectType, gitobj.Hash) (gitobj.EncodedObject, error)
	HasEncodedObject(gitobj.Hash) error
	SetEncodedObject(gitobj.EncodedObject) (gitobj.Hash, error)
}

var (
	_ Store = (*Overlay)(nil)
	_ Store = (gitobj.ObjectStorer)(nil)
)

// Overlay is a Store that reads through to a base Store and keeps every
// write in memory. Merging into an Overlay and dropping it is a preflight:
// nothing reaches the base store. To materialize a merge, write Objects()
// to the real store (as one pack) before updating any ref.
//
// An Overlay is safe for concurrent use; the base must be too if it is
// shared.
type Overlay struct {
	base Store

	mu      sync.RWMutex
	objects map[gitobj.Hash]gitobj.EncodedObject
	order   []gitobj.Hash
}

// NewOverlay returns an empty Overlay over base.
func NewOverlay(base Store) *Overlay {
	return &Overlay{base: base, objects: make(map[gitobj.Hash]gitobj.EncodedObject)}
}

// EncodedObject returns the object from the overlay, else from the base.
// gitobj.AnyObjectType matches every type.
func (o *Overlay) EncodedObject(t gitobj.ObjectType, h gitobj.Hash) (gitobj.EncodedObject, error) {
	o.mu.RLock()
	obj, ok := o.objects[h]
	o.mu.RUnlock()
	if ok {
		if t != gitobj.AnyObjectType && obj.Type() != t {
			return nil, gitobj.ErrObjectNotFound
		}
		return obj, nil
	}
	return o.base.EncodedObject(t, h)
}

// HasEncodedObject reports whether the overlay or the base has h.
func (o *Overlay) HasEncodedObject(h gitobj.Hash) error {
	o.mu.RLock()
	_, ok := o.objects[h]
	o.mu.RUnlock()
	if ok {
		return nil
	}
	return o.base.HasEncodedObject(h)
}

// SetEncodedObject keeps obj in memory. Objects the base already has are
// not kept again.
func (o *Overlay) SetEncodedObject(obj gitobj.EncodedObject) (gitobj.Hash, error) {
	h := obj.Hash()
	o.mu.RLock()
	_, ok := o.objects[h]
	o.mu.RUnlock()
	if ok || o.base.HasEncodedObject(h) == nil {
		return h, nil
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, ok := o.objects[h]; ok {
		return h, nil
	}
	o.objects[h] = obj
	o.order = append(o.order, h)
	return h, nil
}

// Objects returns the objects written to the overlay, in write order
// (children before the trees and commits that name them).
func (o *Overlay) Objects() []gitobj.EncodedObject {
	o.mu.RLock()
	defer o.mu.RUnlock()
	out := make([]gitobj.EncodedObject, 0, len(o.order))
	for _, h := range o.order {
		out = append(out, o.objects[h])
	}
	return out
}

// Len returns the number of objects written to the overlay.
func (o *Overlay) Len() int {
	o.mu.RLock()
	defer o.mu.RUnlock()
	return len(o.order)
}

// flushTo writes the overlay objects reachable from roots into dst.
// Unreachable objects (intermediate virtual merge bases, trees of a
// conflicted merge) are left behind.
func (o *Overlay) flushTo(dst Store, roots ...gitobj.Hash) error {
	o.mu.RLock()
	defer o.mu.RUnlock()
	need := make(map[gitobj.Hash]bool)
	var mark func(h gitobj.Hash) error
	mark = func(h gitobj.Hash) error {
		obj, ok := o.objects[h]
		if !ok || need[h] {
			return nil
		}
		need[h] = true
		switch obj.Type() {
		case gitobj.TreeObject:
			ents, err := readTreeObject(obj)
			if err != nil {
				return err
			}
			for _, e := range ents {
				if err := mark(e.Hash); err != nil {
					return err
				}
			}
		case gitobj.CommitObject:
			c, err := decodeCommit(obj)
			if err != nil {
				return err
			}
			if err := mark(c.Tree); err != nil {
				return err
			}
			for _, p := range c.Parents {
				if err := mark(p); err != nil {
					return err
				}
			}
		}
		return nil
	}
	for _, r := range roots {
		if err := mark(r); err != nil {
			return err
		}
	}
	hs := make([]gitobj.Hash, 0, len(need))
	for _, h := range o.order {
		if need[h] {
			hs = append(hs, h)
		}
	}
	// Keep write order (children first); sort is only a fallback for
	// determinism when order is empty.
	if len(hs) == 0 && len(need) > 0 {
		for h := range need {
			hs = append(hs, h)
		}
		sort.Slice(hs, func(i, j int) bool { return hs[i].String() < hs[j].String() })
	}
	for _, h := range hs {
		if _, err := dst.SetEncodedObject(o.objects[h]); err != nil {
			return err
		}
	}
	return nil
}
