package lockstep

import "strings"

// Redacted replaces a secret in every view: a secret header's value, the
// value of a target URL's query parameter.
const Redacted = "[redacted]"

// RedactURL is a target URL (an effect's, its compensation's, a hook's)
// as every view shows it — API answers, MCP tools, the CLI, the web UI,
// the operations log, server logs and error messages: the scheme, host
// and path as given, each query parameter's name with its value replaced
// by Redacted (an empty value stays empty; a parameter without "=" is
// replaced whole, since it may be a bare token), no credentials
// (userinfo) and no fragment. Receivers often take their token in the
// query (?token=…, ?key=…, ?sig=…): no value is kept, however harmless
// it looks, so the rule needs no list of names. The path stays visible:
// a secret carried in the path is not recognised.
//
// It works on the text, without url.Parse, so an unparsable URL (quoted
// back in a refusal) loses its query and credentials too.
func RedactURL(raw string) string {
	base, tail := raw, ""
	if i := strings.IndexAny(raw, "?#"); i >= 0 {
		base, tail = raw[:i], raw[i:]
	}
	// Userinfo: between "//" and the "@" that ends it, in the authority
	// (up to the first "/" after it).
	if i := strings.Index(base, "//"); i >= 0 {
		start := i + 2
		end := len(base)
		if j := strings.IndexByte(base[start:], '/'); j >= 0 {
			end = start + j
		}
		if at := strings.LastIndexByte(base[start:end], '@'); at >= 0 {
			base = base[:start] + base[start+at+1:]
		}
	}
	query, _, _ := strings.Cut(strings.TrimPrefix(tail, "?"), "#")
	if !strings.HasPrefix(tail, "?") || query == "" {
		return base
	}
	parts := strings.Split(query, "&")
	for i, p := range parts {
		name, value, ok := strings.Cut(p, "=")
		switch {
		case p == "":
		case !ok:
			parts[i] = Redacted
		case value != "":
			parts[i] = name + "=" + Redacted
		}
	}
	return base + "?" + strings.Join(parts, "&")
}
