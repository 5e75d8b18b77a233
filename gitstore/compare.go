package gitstore

import (
	"bytes"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	fdiff "github.com/go-git/go-git/v5/plumbing/format/diff"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/utils/merkletrie"
)

// Compare lists the files that differ from base to head (commits or
// trees), sorted by path, with unified diffs. Only subtrees whose hashes
// differ are read. Directories are not reported, only the files in them;
// renames are reported as a deletion and an addition. A zero base (or
// head) stands for the empty tree: everything added (or deleted).
// Returns not_found if base or head is missing or neither a commit nor a
// tree.
func (n *Network) Compare(base, head plumbing.Hash, opts CompareOptions) ([]FileChange, error) {
	if opts.Context == 0 {
		opts.Context = 3
	} else if opts.Context < 0 {
		opts.Context = 0
	}
	if opts.MaxPatchBytes <= 0 {
		opts.MaxPatchBytes = 1 << 20
	}
	bt, a, err := n.compareSide(base)
	if err != nil {
		return nil, err
	}
	ht, b, err := n.compareSide(head)
	if err != nil {
		return nil, err
	}
	out := []FileChange{}
	if bt == ht {
		return out, nil
	}
	changes, err := object.DiffTree(a, b)
	if err != nil {
		return nil, fmt.Errorf("compare: %w", err)
	}
	sort.Slice(changes, func(i, j int) bool { return changeName(changes[i]) < changeName(changes[j]) })
	budget := opts.MaxPatchBytes
	for _, c := range changes {
		fc, err := n.fileChange(c, opts.Context, &budget)
		if err != nil {
			return nil, fmt.Errorf("compare %s: %w", changeName(c), err)
		}
		out = append(out, fc)
	}
	return out, nil
}

// compareSide resolves one side of Compare; the zero hash is the empty
// tree (nil for go-git's DiffTree).
func (n *Network) compareSide(h plumbing.Hash) (plumbing.Hash, *object.Tree, error) {
	if h.IsZero() {
		return plumbing.ZeroHash, nil, nil
	}
	th, err := n.treeOf(h)
	if err != nil {
		return plumbing.ZeroHash, nil, err
	}
	t, err := object.GetTree(n.Objects(), th)
	if err != nil {
		return plumbing.ZeroHash, nil, fmt.Errorf("compare: %w", err)
	}
	return th, t, nil
}

func changeName(c *object.Change) string {
	if c.To.Name != "" {
		return c.To.Name
	}
	return c.From.Name
}

func kind(m filemode.FileMode) int {
	switch m {
	case filemode.Symlink:
		return 1
	case filemode.Submodule:
		return 2
	case filemode.Dir:
		return 3
	}
	return 0
}

func (n *Network) fileChange(c *object.Change, context int, budget *int64) (FileChange, error) {
	action, err := c.Action()
	if err != nil {
		return FileChange{}, err
	}
	fc := FileChange{Path: changeName(c)}
	from, to := c.From.TreeEntry, c.To.TreeEntry
	switch action {
	case merkletrie.Insert:
		fc.Status = "added"
	case merkletrie.Delete:
		fc.Status = "deleted"
	default:
		switch {
		case kind(from.Mode) != kind(to.Mode):
			fc.Status = "type_changed"
		case from.Hash == to.Hash:
			fc.Status = "mode_changed"
		default:
			fc.Status = "modified"
		}
	}
	if action != merkletrie.Insert {
		fc.OldMode, fc.OldHash = modeString(from.Mode), from.Hash
	}
	if action != merkletrie.Delete {
		fc.NewMode, fc.NewHash = modeString(to.Mode), to.Hash
	}
	if from.Mode == filemode.Submodule || to.Mode == filemode.Submodule {
		return fc, nil // no content here
	}
	for _, h := range []plumbing.Hash{fc.OldHash, fc.NewHash} {
		if !h.IsZero() {
			bin, err := n.isBinary(h)
			if err != nil {
				return FileChange{}, err
			}
			fc.Binary = fc.Binary || bin
		}
	}
	if fc.Binary {
		return fc, nil
	}
	if big, err := n.tooBigToDiff(fc.OldHash, fc.NewHash); err != nil {
		return FileChange{}, err
	} else if big {
		// Counting every line as changed keeps line-count gates safe
		// without running a line diff on huge files.
		if fc.Removed, err = n.countLines(fc.OldHash); err != nil {
			return FileChange{}, err
		}
		if fc.Added, err = n.countLines(fc.NewHash); err != nil {
			return FileChange{}, err
		}
		fc.PatchTruncated = true
		return fc, nil
	}
	// git writes a type change as a deletion and an addition (git apply
	// refuses a mode line that turns a file into a symlink).
	parts := []*object.Change{c}
	if fc.Status == "type_changed" {
		parts = []*object.Change{{From: c.From}, {To: c.To}}
	}
	var sb strings.Builder
	for _, part := range parts {
		if err := n.patch(part, context, &sb, &fc); err != nil {
			return FileChange{}, err
		}
	}
	if *budget <= 0 || int64(sb.Len()) > *budget {
		fc.PatchTruncated = true
		*budget = 0
		return fc, nil
	}
	*budget -= int64(sb.Len())
	fc.Patch = sb.String()
	return fc, nil
}

// patch appends the unified diff of c to sb and counts its lines into fc.
func (n *Network) patch(c *object.Change, context int, sb *strings.Builder, fc *FileChange) error {
	p, err := c.Patch()
	if err != nil {
		return err
	}
	for _, fp := range p.FilePatches() {
		for _, ch := range fp.Chunks() {
			lines := strings.Count(ch.Content(), "\n")
			if !strings.HasSuffix(ch.Content(), "\n") && ch.Content() != "" {
				lines++
			}
			switch ch.Type() {
			case fdiff.Add:
				fc.Added += lines
			case fdiff.Delete:
				fc.Removed += lines
			}
		}
	}
	return fdiff.NewUnifiedEncoder(sb, context).Encode(p)
}

// maxDiffBytes is the blob size above which Compare does not run a line
// diff (see FileChange.PatchTruncated).
const maxDiffBytes = 16 << 20

func (n *Network) tooBigToDiff(hs ...plumbing.Hash) (bool, error) {
	for _, h := range hs {
		if h.IsZero() {
			continue
		}
		sz, err := n.objectSize(h)
		if err != nil {
			return false, err
		}
		if sz > maxDiffBytes {
			return true, nil
		}
	}
	return false, nil
}

// countLines counts the lines of blob h (0 for the zero hash).
func (n *Network) countLines(h plumbing.Hash) (int, error) {
	if h.IsZero() {
		return 0, nil
	}
	obj, err := n.typed(plumbing.BlobObject, h)
	if err != nil {
		return 0, err
	}
	r, err := obj.Reader()
	if err != nil {
		return 0, err
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		return 0, err
	}
	lines := bytes.Count(b, []byte{'\n'})
	if len(b) > 0 && b[len(b)-1] != '\n' {
		lines++
	}
	return lines, nil
}

// isBinary applies git's rule: a NUL byte in the first 8000 bytes.
func (n *Network) isBinary(h plumbing.Hash) (bool, error) {
	obj, err := n.typed(plumbing.BlobObject, h)
	if err != nil {
		return false, err
	}
	r, err := obj.Reader()
	if err != nil {
		return false, err
	}
	defer r.Close()
	buf := make([]byte, 8000)
	k, err := io.ReadFull(r, buf)
	if err != nil && err != io.ErrUnexpectedEOF && err != io.EOF {
		return false, err
	}
	return bytes.IndexByte(buf[:k], 0) >= 0, nil
}
