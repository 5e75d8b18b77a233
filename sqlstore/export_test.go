package sqlstore

// IdemOpsQueries are the statements that find the entries of an
// Idempotency-Key, for TestIdemOpsUseIndex.
var IdemOpsQueries = []string{qIdemOpsCount, qIdemOpsReplay, qIdemOps}

// CountOwnedQuery counts a key's active workspaces (the workspace quota).
const CountOwnedQuery = qCountOwned
