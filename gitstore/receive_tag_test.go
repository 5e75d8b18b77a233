package gitstore

import (
	"bytes"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lockstep-hq/lockstep"
)

// An annotated tag whose "type" header does not match the object it
// names (git fsck: "object X is a blob, not a commit", "bad tag
// pointer") is refused, whether its target is in the same pack or stored
// already. Once stored, such a tag breaks every clone of a repository
// advertising it: upload-pack parses the tag, records its target with the
// wrong type and dies with "not our ref" on the other refs using it.
func TestReceivePackRefusesTagTypeMismatch(t *testing.T) {
	tagBody := func(target, typ string) string {
		return fmt.Sprintf("object %s\ntype %s\ntag v1\ntagger t <t@x> 1700000000 +0000\n\nmsg\n", target, typ)
	}
	for _, stored := range []bool{false, true} {
		t.Run(fmt.Sprintf("target-stored=%v", stored), func(t *testing.T) {
			n := MustOpen(t)
			dir := t.TempDir()
			git(t, dir, nil, "init", "-q")
			c := clientCommit(t, dir, map[string]string{"a.txt": "hi\n"})
			gd := filepath.Join(dir, ".git")
			blob := strings.TrimSpace(git(t, dir, nil, "rev-parse", "HEAD:a.txt"))
			if stored {
				if _, err := n.ReceivePack(bytes.NewReader(packObjects(t, gd, c+"\n", "--revs")), Limits{}); err != nil {
					t.Fatal(err)
				}
			}
			// A well-formed tag of the blob is accepted ...
			good := hashObject(t, gd, "tag", tagBody(blob, "blob"), false)
			// ... one claiming the blob is a commit is not.
			bad := hashObject(t, gd, "tag", tagBody(blob, "commit"), true)
			objs := bad + "\n"
			if !stored {
				objs += blob + "\n"
			}
			before := storeFiles(t, n)
			_, err := n.ReceivePack(bytes.NewReader(packObjects(t, gd, objs)), Limits{})
			if lockstep.ErrorCode(err) != lockstep.EINVALID || !strings.Contains(lockstep.ErrorMessage(err), "is a blob, not a commit") {
				t.Fatalf("err %v, want invalid_argument naming the type mismatch", err)
			}
			if after := storeFiles(t, n); len(after) != len(before) {
				t.Fatalf("store changed: %v", after)
			}
			objs = good + "\n"
			if !stored {
				objs += blob + "\n"
			}
			if _, err := n.ReceivePack(bytes.NewReader(packObjects(t, gd, objs)), Limits{}); err != nil {
				t.Fatalf("good tag: %v", err)
			}
		})
	}
}
