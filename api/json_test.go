package api

import "sigs.k8s.io/yaml"

// JSON is the document converted to JSON, as web serves it (web converts
// it; this package links no YAML library, see openapi.go).
func JSON() ([]byte, error) { return yaml.YAMLToJSON(YAML) }
