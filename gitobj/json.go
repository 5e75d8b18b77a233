package gitobj

import (
	"encoding/json"
	"time"
)

// JSON: these structs go straight into the HTTP API, so hashes are hex
// strings (go-git's plumbing.Hash would encode as a byte array), a zero
// hash is omitted, keys are snake_case.

func hexOrEmpty(h Hash) string {
	if h.IsZero() {
		return ""
	}
	return h.String()
}

type signatureJSON struct {
	Name  string    `json:"name"`
	Email string    `json:"email"`
	Time  time.Time `json:"time"`
}

func sigJSON(s Signature) signatureJSON {
	return signatureJSON{Name: s.Name, Email: s.Email, Time: s.When}
}

// MarshalJSON encodes the commit with hex hashes.
func (c CommitInfo) MarshalJSON() ([]byte, error) {
	parents := make([]string, len(c.Parents))
	for i, p := range c.Parents {
		parents[i] = p.String()
	}
	return json.Marshal(struct {
		Hash      string        `json:"hash"`
		Tree      string        `json:"tree"`
		Parents   []string      `json:"parents"`
		Author    signatureJSON `json:"author"`
		Committer signatureJSON `json:"committer"`
		Message   string        `json:"message"`
	}{c.Hash.String(), c.Tree.String(), parents, sigJSON(c.Author), sigJSON(c.Committer), c.Message})
}

// MarshalJSON encodes the entry with a hex hash.
func (e TreeEntry) MarshalJSON() ([]byte, error) {
	type plain TreeEntry
	return json.Marshal(struct {
		plain
		Hash string `json:"hash"`
	}{plain(e), e.Hash.String()})
}

// MarshalJSON encodes the blob info with a hex hash.
func (b BlobInfo) MarshalJSON() ([]byte, error) {
	type plain BlobInfo
	return json.Marshal(struct {
		plain
		Hash string `json:"hash"`
	}{plain(b), b.Hash.String()})
}

// MarshalJSON encodes the change with hex hashes (omitted when zero).
func (f FileChange) MarshalJSON() ([]byte, error) {
	type plain FileChange
	return json.Marshal(struct {
		plain
		OldHash string `json:"old_hash,omitempty"`
		NewHash string `json:"new_hash,omitempty"`
	}{plain(f), hexOrEmpty(f.OldHash), hexOrEmpty(f.NewHash)})
}

// MarshalJSON encodes the ingest summary (not its objects) with a hex
// tree hash.
func (in Ingest) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Tree  string `json:"tree"`
		Files int    `json:"files"`
		Bytes int64  `json:"bytes"`
	}{in.Tree.String(), in.Files, in.Bytes})
}
