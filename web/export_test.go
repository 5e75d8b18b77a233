package web

// RouteFact is a row of routeTable as the external tests see it.
type RouteFact struct {
	Key           string // "METHOD /pattern"
	Group         string // public, mcp, api, git
	Write         bool
	SuccessStatus int
	Idempotency   string // held, one_tx, none
	UploadSlot    bool
	PreAuth       bool
	Runner        bool
	UploadBody    bool
	HasHandler    bool
}

// RouteFacts returns routeTable (routefacts.go) and how many distinct keys
// its index holds.
func RouteFacts() ([]RouteFact, int) {
	groups := map[routeGroup]string{groupPublic: "public", groupMCP: "mcp", groupAPI: "api", groupGit: "git"}
	idem := map[idemKind]string{idemHeld: "held", idemOneTx: "one_tx", idemNone: "none"}
	out := make([]RouteFact, 0, len(routeTable))
	for i := range routeTable {
		f := &routeTable[i]
		out = append(out, RouteFact{Key: f.key(), Group: groups[f.group], Write: f.write(), SuccessStatus: f.successStatus(),
			Idempotency: idem[f.idem], UploadSlot: f.uploadSlot, PreAuth: f.preAuth != nil, Runner: f.runner,
			UploadBody: f.body != bodyJSON, HasHandler: f.handler != nil})
	}
	return out, len(routeIndex)
}
