// The OpenAPI 3.1 document of Lockstep's HTTP API
// (openapi.yaml), the contract that the router (web/routes.go), the
// end-to-end suite's response validation and generated clients share.
// The web package serves it as JSON at GET /api/v1/openapi.json; a test in
// web fails when a route exists in the router but not here, or the reverse.

package api

import (
	_ "embed"
)

// YAML is the document as kept in the repository. Its JSON form (what
// web serves) is made in web, not here: this package is linked into the
// client build (`lockstep`), where a YAML library's initialisers would
// run at every start of every client command.
//
//go:embed openapi.yaml
var YAML []byte
