// Package api is Lockstep's HTTP contract in two forms: the OpenAPI 3.1
// document (openapi.yaml, served by web at GET /api/v1/openapi.json and
// checked against the router by a drift test) and the Go wire types of
// every route — request bodies, responses, list envelopes and the error
// envelope — in types.go.
//
// The Go types are what goes over the wire, byte for byte: field names,
// omitempty behaviour and number types are those the server has always
// sent. The client package sends and decodes them. The web package
// decodes every JSON request body into them and encodes them where it
// builds an answer itself; answers that are domain values (a repository,
// a check, a checkpoint) it still encodes from the domain type, and the
// client's tests check, answer by answer, that decoding into the api type
// and encoding again gives the server's bytes. The package imports only the
// standard library (its tests also sigs.k8s.io/yaml), never a
// driver, gin or a domain package, so any Go program can use it.
package api
