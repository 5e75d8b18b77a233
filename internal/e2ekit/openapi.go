package e2ekit

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	"github.com/pb33f/libopenapi-validator/helpers"

	"github.com/lockstep-hq/lockstep/api"
)

// Every response the harness receives through Try (and so Call, MustJSON
// and the helpers built on them) is validated against api/openapi.yaml;
// a mismatch fails the test that started the server, naming the route and
// the difference. Requests to paths or methods the document does not have
// (deliberate 404s and 405s, the /ui/ pages) are not validated: the drift
// test in web keeps the router and the document equal.
// LOCKSTEP_E2E_OPENAPI=0 turns the validation off.

var openapiValidator = sync.OnceValues(func() (*lockedValidator, error) {
	doc, err := libopenapi.NewDocument(api.YAML)
	if err != nil {
		return nil, err
	}
	v, errs := validator.NewValidator(doc)
	if len(errs) > 0 {
		return nil, fmt.Errorf("openapi validator: %v", errs)
	}
	return &lockedValidator{v: v}, nil
})

type lockedValidator struct {
	mu sync.Mutex
	v  validator.Validator
}

// ValidateResponse checks one exchange against the OpenAPI document and
// returns the problems ("" when it conforms or is not documented).
func ValidateResponse(req *http.Request, status int, header http.Header, body []byte) string {
	if os.Getenv("LOCKSTEP_E2E_OPENAPI") == "0" {
		return ""
	}
	lv, err := openapiValidator()
	if err != nil {
		return "load api/openapi.yaml: " + err.Error()
	}
	resp := &http.Response{StatusCode: status, Header: header, Body: io.NopCloser(bytes.NewReader(body)), Request: req}
	lv.mu.Lock()
	ok, errs := lv.v.ValidateHttpResponse(req, resp)
	lv.mu.Unlock()
	if ok {
		return ""
	}
	var out []string
	for _, e := range errs {
		if e.ValidationType == helpers.PathValidation &&
			(e.ValidationSubType == helpers.ValidationMissing || e.ValidationSubType == helpers.ValidationMissingOperation) {
			return "" // not a documented operation: nothing to validate
		}
		msg := e.Message
		if e.Reason != "" {
			msg += ": " + e.Reason
		}
		for _, s := range e.SchemaValidationErrors {
			msg += fmt.Sprintf("\n      at %s: %s", s.FieldPath, s.Reason)
		}
		out = append(out, msg)
	}
	if len(out) == 0 {
		return ""
	}
	b := string(body)
	if len(b) > 600 {
		b = b[:600] + "…"
	}
	return fmt.Sprintf("response of %s %s (%d) does not match api/openapi.yaml:\n    %s\n    body: %s",
		req.Method, req.URL.Path, status, strings.Join(out, "\n    "), b)
}
