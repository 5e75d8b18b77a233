package api

import (
	"encoding/json"
	"sort"
	"strings"
	"testing"
)

// TestNoSchemaDefaultOnProperties: openapi-typescript (default flags, what
// clients/typescript uses) makes an object property with a `default`
// required, so a client could not omit a field the server treats as
// optional (issue 24 item 8). Say the default in the description instead.
// Parameters may have defaults: they stay optional.
func TestNoSchemaDefaultOnProperties(t *testing.T) {
	j, err := JSON()
	if err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := json.Unmarshal(j, &doc); err != nil {
		t.Fatal(err)
	}
	var bad []string
	var walk func(v any, path []string)
	walk = func(v any, path []string) {
		switch v := v.(type) {
		case map[string]any:
			if props, ok := v["properties"].(map[string]any); ok {
				for name, p := range props {
					if pm, ok := p.(map[string]any); ok {
						if _, has := pm["default"]; has {
							bad = append(bad, strings.Join(append(path, "properties", name), "/"))
						}
					}
				}
			}
			for k, c := range v {
				walk(c, append(path[:len(path):len(path)], k))
			}
		case []any:
			for _, c := range v {
				walk(c, path)
			}
		}
	}
	walk(doc, nil)
	sort.Strings(bad)
	if len(bad) > 0 {
		t.Fatalf("object properties with a schema `default` (openapi-typescript makes them required; describe the default instead):\n%s", strings.Join(bad, "\n"))
	}
}
