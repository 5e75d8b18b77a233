package sqlstore

// IdemOpsQueries are the statements that find the entries of an
// Idempotency-Key, for TestIdemOpsUseIndex.
var IdemOpsQueries = []string{qIdemOpsCount, qIdemOpsReplay, qIdemOps}
