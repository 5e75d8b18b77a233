// The OpenAPI 3.1 document of Lockstep's HTTP API
// (openapi.yaml), the contract that the router (web/routes.go), the
// end-to-end suite's response validation and generated clients share.
// The web package serves it as JSON at GET /api/v1/openapi.json; a test in
// web fails when a route exists in the router but not here, or the reverse.

package api

import (
	_ "embed"
	"sync"

	"sigs.k8s.io/yaml"
)

// YAML is the document as kept in the repository.
//
//go:embed openapi.yaml
var YAML []byte

var jsonOnce = sync.OnceValues(func() ([]byte, error) { return yaml.YAMLToJSON(YAML) })

// JSON returns the document converted to JSON (computed once).
func JSON() ([]byte, error) { return jsonOnce() }
