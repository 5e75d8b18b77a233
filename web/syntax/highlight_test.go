package syntax

import (
	"archive/zip"
	"bytes"
	"flag"
	"fmt"
	"html"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"unsafe"

	"github.com/alecthomas/chroma/v2"
	chromahtml "github.com/alecthomas/chroma/v2/formatters/html"
	"github.com/alecthomas/chroma/v2/lexers"
	"github.com/alecthomas/chroma/v2/styles"
)

var update = flag.Bool("update", false, "rewrite lexers.zip and highlight.css from chroma")

// generate serialises every lexer of chroma's registry and the "github"
// stylesheet. A lexer chroma cannot serialise as it is (rules written
// with Go functions, a lexer wrapped in another) is derived first: see
// derive. notes says, per language, what the derivation approximated.
func generate(t *testing.T) (zipped []byte, files map[string][]byte, css []byte, notes map[string][]string, plain []string) {
	t.Helper()
	files = map[string][]byte{}
	notes = map[string][]string{}
	for _, l := range lexers.GlobalLexerRegistry.Lexers {
		name := l.Config().Name
		rl, why, err := derive(l)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		data, err := marshal(rl)
		if err != nil {
			t.Fatalf("%s: derived lexer still not serialisable: %v", name, err)
		}
		if len(why) > 0 {
			notes[name] = why
		}
		file := fileName(name)
		if _, dup := files[file]; dup {
			t.Fatalf("two lexers serialise to %s", file)
		}
		files[file] = data
	}
	// A derived lexer must lex chroma's own test data (lexers/testdata
	// in chroma's module) with at most 1% more of its characters in Error
	// tokens than chroma's lexer: one with more is worse than plain text
	// and is left out. (ERB has 1 character: a template tag inside a
	// <script>, which HTML hands whole to the JavaScript lexer.)
	reg := load(zipFiles(t, files))
	samples := chromaTestData(t)
	for name, why := range notes {
		ours := reg.Get(name)
		texts := samples[name]
		if len(texts) == 0 {
			notes[name] = append(why, "chroma has no test data for it")
			continue
		}
		var same, total, ourErrors, theirErrors int
		for _, text := range texts {
			o, c := tokens(t, ours, text), tokens(t, lexers.Get(name), text)
			s, n := sameTypes(o, c)
			same, total = same+s, total+n
			ourErrors += errorRunes(o)
			theirErrors += errorRunes(c)
		}
		if ourErrors-theirErrors > total/100 {
			plain = append(plain, fmt.Sprintf("%s (on chroma's test data, %d characters of Error tokens against chroma's %d: %s)", name, ourErrors, theirErrors, strings.Join(why, "; ")))
			delete(notes, name)
			delete(files, fileName(name))
			continue
		}
		notes[name] = append(why, fmt.Sprintf("chroma's test data: %d%% of %d characters get chroma's token type, %d in Error tokens (chroma: %d)", same*100/max(total, 1), total, ourErrors, theirErrors))
	}
	sort.Strings(plain)
	zipped = zipFiles(t, files)
	var cb bytes.Buffer
	if err := chromahtml.New(chromahtml.WithClasses(true)).WriteCSS(&cb, styles.Get("github")); err != nil {
		t.Fatal(err)
	}
	return zipped, files, cb.Bytes(), notes, plain
}

// fileName is the name of a lexer's file in the zip.
func fileName(lexer string) string {
	return strings.ToLower(strings.NewReplacer("/", "_", " ", "_", "+", "plus", "#", "sharp").Replace(lexer)) + ".xml"
}

// zipFiles zips files in name order with no times: reproducible.
func zipFiles(t *testing.T, files map[string][]byte) []byte {
	t.Helper()
	var zb bytes.Buffer
	zw := zip.NewWriter(&zb)
	for _, n := range sortedKeys(files) {
		w, err := zw.CreateHeader(&zip.FileHeader{Name: n, Method: zip.Deflate})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(files[n]); err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return zb.Bytes()
}

// chromaTestData reads the inputs of chroma's lexer tests (the module's
// lexers/testdata: <lexer>.*.actual files and <lexer>/ directories) by
// lexer name.
func chromaTestData(t *testing.T) map[string][]string {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/alecthomas/chroma/v2").Output()
	if err != nil {
		t.Fatalf("go list -m chroma: %v", err)
	}
	dir := filepath.Join(strings.TrimSpace(string(out)), "lexers", "testdata")
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	samples := map[string][]string{}
	add := func(lexer, path string) {
		l := lexers.Get(lexer)
		if l == nil || !strings.HasSuffix(path, ".actual") {
			return
		}
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		samples[l.Config().Name] = append(samples[l.Config().Name], string(data))
	}
	for _, e := range entries {
		if e.IsDir() {
			sub, err := os.ReadDir(filepath.Join(dir, e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range sub {
				add(e.Name(), filepath.Join(dir, e.Name(), f.Name()))
			}
			continue
		}
		add(strings.SplitN(e.Name(), ".", 2)[0], filepath.Join(dir, e.Name()))
	}
	return samples
}

// sameTypes counts the characters that two tokenisations of one text
// give the same token type, and the characters.
func sameTypes(a, b []chroma.Token) (same, total int) {
	types := func(ts []chroma.Token) []chroma.TokenType {
		var out []chroma.TokenType
		for _, t := range ts {
			for range t.Value {
				out = append(out, t.Type)
			}
		}
		return out
	}
	ta, tb := types(a), types(b)
	for i := range min(len(ta), len(tb)) {
		if ta[i] == tb[i] {
			same++
		}
	}
	return same, max(len(ta), len(tb))
}

func errorRunes(ts []chroma.Token) int {
	n := 0
	for _, t := range ts {
		if t.Type == chroma.Error {
			n += len([]rune(t.Value))
		}
	}
	return n
}

// derive returns a RegexLexer chroma can serialise for l, taken from l
// itself at generation time (never copied by hand), and what it had to
// approximate:
//   - a wrapper (markdown's front matter, HTTP's body by Content-Type,
//     Common Lisp's and EmacsLisp's TypeRemappingLexer, which turns
//     symbols such as defun into keywords) gives the lexer it wraps;
//   - a DelegatingLexer (ERB, Go HTML Template, PHTML, Svelte,
//     YAML+Jinja: a template language in HTML or YAML) becomes one lexer
//     (merge): the host's states, each starting with the template's
//     rules that open a template tag;
//   - in the rules, an emitter written in Go (UsingLexer, ByGroupNames,
//     an EmitterFunc) becomes the fixed token types it emits when it has
//     them (probe: HTTP's headers), else the plain token type of its
//     rule (the type of the nearest group of a ByGroups, else Text), and
//     a mutator written in Go (a MutatorFunc) is dropped (no state
//     change).
//
// generate then checks each derived lexer on chroma's test data.
func derive(l chroma.Lexer) (*chroma.RegexLexer, []string, error) {
	var why []string
	if root, lang := field(l, "root"), field(l, "language"); root != nil && lang != nil {
		rl, w, err := derive(lang)
		if err != nil {
			return nil, nil, err
		}
		host, w2, err := derive(root)
		if err != nil {
			return nil, nil, err
		}
		merged, err := merge(rl, host)
		if err != nil {
			return nil, nil, err
		}
		name := host.Config().Name
		why = append(why, fmt.Sprintf("one lexer: %s's states each start with the template's opening rules, and the template's rules that hand text to %s (token Other) are dropped; chroma lexes the %s with the template parts cut out instead", name, name, name))
		return merged, append(append(why, w...), w2...), nil
	}
	rl, ok := l.(*chroma.RegexLexer)
	if !ok {
		inner := field(l, "Lexer")
		if inner == nil {
			inner = field(l, "lexer")
		}
		if inner == nil {
			return nil, nil, fmt.Errorf("lexer %T: neither a RegexLexer nor a wrapper of one", l)
		}
		if reflect.ValueOf(l).Elem().FieldByName("mapper").IsValid() {
			why = append(why, "token types are not remapped (TypeRemappingLexer: e.g. symbols chroma turns into keywords or builtins stay names)")
		} else {
			why = append(why, fmt.Sprintf("what its wrapper %T does in Go is lost (the wrapped lexer is used)", l))
		}
		r, w, err := derive(inner)
		if err != nil {
			return nil, nil, err
		}
		return r, append(why, w...), nil
	}
	if _, err := marshal(rl); err == nil {
		return rl, why, nil
	}
	rules, err := rl.Rules()
	if err != nil {
		return nil, nil, err
	}
	out, w := mapRules(rules, rl.Config())
	return newLexer(rl, out), append(why, w...), nil
}

// newLexer is rl's configuration with other rules.
func newLexer(rl *chroma.RegexLexer, rules chroma.Rules) *chroma.RegexLexer {
	cfg := *rl.Config()
	return chroma.MustNewLexer(&cfg, func() chroma.Rules { return rules })
}

// field returns the chroma.Lexer held in the struct field name of l
// (exported or not: chroma's wrappers keep theirs unexported), or nil.
func field(l chroma.Lexer, name string) chroma.Lexer {
	v := reflect.ValueOf(l)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return nil
	}
	f := v.Elem().FieldByName(name)
	if !f.IsValid() || f.Type() != reflect.TypeFor[chroma.Lexer]() {
		return nil
	}
	f = reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem()
	inner, _ := f.Interface().(chroma.Lexer)
	return inner
}

// merge builds one lexer for a template language (lang, whose text
// outside template tags is Other) in a host language (host): host's
// states, renamed "Host/state", each preceded by lang's root rules that
// open a template tag; lang's own states unchanged; lang's root is
// host's root so. Host's patterns keep host's regexp flags.
func merge(lang, host *chroma.RegexLexer) (*chroma.RegexLexer, error) {
	lrules, err := lang.Rules()
	if err != nil {
		return nil, err
	}
	hrules, err := host.Rules()
	if err != nil {
		return nil, err
	}
	prefix := host.Config().Name + "/"
	rename := func(state string) string {
		if strings.HasPrefix(state, "#") { // #pop, #push
			return state
		}
		return prefix + state
	}
	var openers []chroma.Rule
	for _, r := range lrules["root"] {
		if !emitsOther(r.Type) {
			openers = append(openers, r)
		}
	}
	out := chroma.Rules{}
	for state, rs := range lrules {
		if state != "root" {
			out[state] = rs
		}
	}
	wrap := flagGroup(host.Config(), lang.Config())
	for state, rs := range hrules {
		name := rename(state)
		if state == "root" {
			name = "root"
		}
		list := append([]chroma.Rule(nil), openers...)
		for _, r := range rs {
			if r.Pattern != "" && wrap != "" {
				r.Pattern = wrap + r.Pattern + ")"
			}
			r.Type = renameEmitter(r.Type, rename)
			r.Mutator = renameMutator(r.Mutator, rename)
			list = append(list, r)
		}
		out[name] = list
	}
	if _, ok := out[rename("root")]; !ok { // host states that push "root" back
		out[rename("root")] = out["root"]
	}
	return newLexer(lang, out), nil
}

// flagGroup opens a group giving host's regexp flags inside a lexer
// compiled with lang's ("" when they are the same): chroma compiles
// every rule with the flags of its lexer's config.
func flagGroup(host, lang *chroma.Config) string {
	var on, off string
	for _, f := range []struct {
		flag       string
		host, lang bool
	}{
		{"m", !host.NotMultiline, !lang.NotMultiline},
		{"i", host.CaseInsensitive, lang.CaseInsensitive},
		{"s", host.DotAll, lang.DotAll},
	} {
		switch {
		case f.host && !f.lang:
			on += f.flag
		case !f.host && f.lang:
			off += f.flag
		}
	}
	if on == "" && off == "" {
		return ""
	}
	if off != "" {
		off = "-" + off
	}
	return "(?" + on + off + ":"
}

// emitsOther tells whether e emits Other tokens, alone or in a group.
func emitsOther(e chroma.Emitter) bool {
	if e == chroma.Other {
		return true
	}
	if se, ok := e.(chroma.SerialisableEmitter); ok && (se.EmitterKind() == "bygroups" || se.EmitterKind() == "usingbygroup") {
		for _, g := range reflect.ValueOf(e).Elem().FieldByName("Emitters").Interface().(chroma.Emitters) {
			if emitsOther(g) {
				return true
			}
		}
	}
	return false
}

func renameEmitter(e chroma.Emitter, rename func(string) string) chroma.Emitter {
	se, ok := e.(chroma.SerialisableEmitter)
	if !ok {
		return e
	}
	switch se.EmitterKind() {
	case "usingself":
		return chroma.UsingSelf(rename(reflect.ValueOf(e).Elem().FieldByName("State").String()))
	case "bygroups":
		groups := reflect.ValueOf(e).Elem().FieldByName("Emitters").Interface().(chroma.Emitters)
		out := make([]chroma.Emitter, len(groups))
		for i, g := range groups {
			out[i] = renameEmitter(g, rename)
		}
		return chroma.ByGroups(out...)
	}
	return e
}

func renameMutator(m chroma.Mutator, rename func(string) string) chroma.Mutator {
	sm, ok := m.(chroma.SerialisableMutator)
	if !ok {
		return m
	}
	v := reflect.ValueOf(m).Elem()
	states := func() []string {
		var out []string
		for _, s := range v.FieldByName("States").Interface().([]string) {
			out = append(out, rename(s))
		}
		return out
	}
	switch sm.MutatorKind() {
	case "include":
		return chroma.Include(rename(v.FieldByName("State").String())).Mutator
	case "push":
		return chroma.Push(states()...)
	case "combined":
		return chroma.Combined(states()...)
	case "mutators":
		var out []chroma.Mutator
		for _, x := range v.FieldByName("Mutators").Interface().([]chroma.Mutator) {
			out = append(out, renameMutator(x, rename))
		}
		return chroma.Mutators(out...)
	}
	return m
}

// mapRules copies rules replacing what chroma cannot serialise (see
// derive).
func mapRules(rules chroma.Rules, cfg *chroma.Config) (chroma.Rules, []string) {
	states := map[string]map[string]bool{} // what was replaced: in which states
	note := func(state, what string) {
		if states[what] == nil {
			states[what] = map[string]bool{}
		}
		states[what][state] = true
	}
	var emitter func(e chroma.Emitter, plain chroma.TokenType, state, pattern string) chroma.Emitter
	emitter = func(e chroma.Emitter, plain chroma.TokenType, state, pattern string) chroma.Emitter {
		switch e := e.(type) {
		case nil:
			return nil
		case chroma.TokenType:
			return e
		case chroma.SerialisableEmitter:
			if e.EmitterKind() != "bygroups" {
				return e
			}
			groups := reflect.ValueOf(e).Elem().FieldByName("Emitters").Interface().(chroma.Emitters)
			out := make([]chroma.Emitter, len(groups))
			for i, g := range groups {
				out[i] = emitter(g, groupType(groups, i), state, "")
			}
			return chroma.ByGroups(out...)
		default:
			if pattern != "" {
				if p := probe(e, pattern, cfg); p != nil {
					note(state, fmt.Sprintf("%T (a Go function) replaced by the fixed token types it emits (%s)", e, describe(p)))
					return p
				}
			}
			note(state, fmt.Sprintf("%T (a Go function) emits %s instead", e, plain))
			return plain
		}
	}
	var mutator func(m chroma.Mutator, state string) chroma.Mutator
	mutator = func(m chroma.Mutator, state string) chroma.Mutator {
		switch m := m.(type) {
		case nil:
			return nil
		case chroma.SerialisableMutator:
			if m.MutatorKind() != "mutators" {
				return m
			}
			var keep []chroma.Mutator
			for _, x := range reflect.ValueOf(m).Elem().FieldByName("Mutators").Interface().([]chroma.Mutator) {
				if y := mutator(x, state); y != nil {
					keep = append(keep, y)
				}
			}
			if len(keep) == 0 {
				return nil
			}
			return chroma.Mutators(keep...)
		default:
			note(state, fmt.Sprintf("%T (a Go function) is dropped: no state change", m))
			return nil
		}
	}
	out := chroma.Rules{}
	for state, rs := range rules {
		for _, r := range rs {
			r.Type = emitter(r.Type, chroma.Text, state, r.Pattern)
			r.Mutator = mutator(r.Mutator, state)
			out[state] = append(out[state], r)
		}
	}
	var why []string
	for _, what := range sortedKeys(states) {
		why = append(why, fmt.Sprintf("%s (states %s)", what, strings.Join(sortedKeys(states[what]), ", ")))
	}
	return out, why
}

// probe runs a Go emitter of a rule on placeholder groups: when it
// emits each group once, in order, with a token type that does not
// depend on the text (HTTP's header lines), it is that ByGroups (or
// that token type for the whole match). Otherwise (it reads the lexer
// state, the text, another lexer) nil.
func probe(e chroma.Emitter, pattern string, cfg *chroma.Config) (out chroma.Emitter) {
	groups := make([]string, 33)
	for i := range groups {
		groups[i] = fmt.Sprintf("\x00group%d\x00", i)
	}
	defer func() {
		if recover() != nil {
			out = nil
		}
	}()
	state := &chroma.LexerState{Groups: groups, NamedGroups: map[string]string{}, MutatorContext: map[any]any{}}
	toks := e.Emit(groups, state).Tokens()
	if len(toks) == 1 && toks[0].Value == groups[0] {
		return toks[0].Type
	}
	types := make([]chroma.Emitter, len(toks))
	for i, tok := range toks {
		if tok.Value != groups[i+1] {
			return nil
		}
		types[i] = tok.Type
	}
	if len(types) == 0 {
		return nil
	}
	// chroma checks that a ByGroups has one emitter per group.
	c := *cfg
	c.Name = "probe"
	byGroups := chroma.ByGroups(types...)
	l := chroma.MustNewLexer(&c, func() chroma.Rules {
		return chroma.Rules{"root": {{Pattern: pattern, Type: byGroups}}}
	})
	if _, err := l.Tokenise(nil, ""); err != nil {
		return nil
	}
	return byGroups
}

// describe names the token types of a plain or ByGroups emitter.
func describe(e chroma.Emitter) string {
	if tt, ok := e.(chroma.TokenType); ok {
		return tt.String()
	}
	var names []string
	for _, g := range reflect.ValueOf(e).Elem().FieldByName("Emitters").Interface().(chroma.Emitters) {
		names = append(names, describe(g))
	}
	return "ByGroups " + strings.Join(names, ", ")
}

// groupType is the token type nearest group i of a ByGroups among its
// plain token types (Text when it has none): a raw Go string's
// ByGroups(String, UsingLexer(template), String) gives String.
func groupType(groups chroma.Emitters, i int) chroma.TokenType {
	for d := 1; d < len(groups); d++ {
		for _, j := range []int{i - d, i + d} {
			if j >= 0 && j < len(groups) {
				if tt, ok := groups[j].(chroma.TokenType); ok {
					return tt
				}
			}
		}
	}
	return chroma.Text
}

// marshal serialises a lexer, recovering from the panics chroma raises
// for rules it cannot serialise (Go functions as emitters or mutators).
func marshal(rl *chroma.RegexLexer) (data []byte, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%v", r)
		}
	}()
	data, err = chroma.Marshal(rl)
	if err != nil {
		return nil, err
	}
	data = sortStates(data)
	// It must also read back: a lexer that serialises but does not
	// load would break the registry at the first highlight.
	if _, err := chroma.Unmarshal(data); err != nil {
		return nil, err
	}
	return data, nil
}

// sortStates orders the <state> blocks of a serialised lexer by name:
// chroma writes them in map order, and the zip must not change from
// one run to the next.
func sortStates(data []byte) []byte {
	lines := strings.Split(string(data), "\n")
	var out, blocks []string
	var cur []string
	for _, l := range lines {
		switch {
		case cur == nil && strings.HasPrefix(l, "    <state ") && strings.HasSuffix(l, "/>"):
			blocks = append(blocks, l)
		case cur == nil && strings.HasPrefix(l, "    <state "):
			cur = []string{l}
		case cur != nil:
			cur = append(cur, l)
			if l == "    </state>" {
				blocks = append(blocks, strings.Join(cur, "\n"))
				cur = nil
			}
		case l == "  </rules>":
			sort.Strings(blocks)
			out = append(out, blocks...)
			out = append(out, l)
		default:
			out = append(out, l)
		}
	}
	return []byte(strings.Join(out, "\n"))
}

// TestGenerated checks the embedded lexers and stylesheet against the
// chroma in go.mod (so an upgrade that changes them fails here until
// regenerated with -update), and that each embedded lexer loads.
func TestGenerated(t *testing.T) {
	zipped, files, css, notes, plain := generate(t)
	t.Logf("%d lexers serialised, %d of them derived:", len(files), len(notes))
	for _, name := range sortedKeys(notes) {
		t.Logf("  %s: %s", name, strings.Join(notes[name], "; "))
	}
	for _, p := range plain {
		t.Logf("left out (plain text): %s", p)
	}
	if *update {
		if err := os.WriteFile("lexers.zip", zipped, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile("highlight.css", css, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if !bytes.Equal(CSS, css) {
		t.Errorf("highlight.css differs from chroma's github style: run go test ./web/syntax -run TestGenerated -update")
	}
	zr, err := zip.NewReader(bytes.NewReader(lexersZip), int64(len(lexersZip)))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, f := range zr.File {
		seen[f.Name] = true
		rc, err := f.Open()
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		_, err = b.ReadFrom(rc)
		rc.Close()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b.Bytes(), files[f.Name]) {
			t.Errorf("embedded lexer %s differs from chroma's (or is gone): regenerate with -update", f.Name)
		}
	}
	for n := range files {
		if !seen[n] {
			t.Errorf("chroma has lexer %s, the embedded zip does not: regenerate with -update", n)
		}
	}
	if got, want := len(Registry().Lexers), len(files); got != want {
		t.Errorf("registry has %d lexers, want %d", got, want)
	}
	// Every Using names a lexer of the registry: one that does not would
	// panic at the first highlight reaching it.
	using := regexp.MustCompile(`<using lexer="([^"]*)"`)
	for _, n := range sortedKeys(files) {
		for _, m := range using.FindAllStringSubmatch(string(files[n]), -1) {
			if name := html.UnescapeString(m[1]); Registry().Get(name) == nil {
				t.Errorf("%s uses lexer %q, not in the registry", n, name)
			}
		}
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// TestSameTokensAsChroma highlights a few files with the embedded
// lexers and with chroma's own registry and expects the same tokens:
// the review pages colour code exactly as before.
func TestSameTokensAsChroma(t *testing.T) {
	samples := map[string]string{
		"main.go":       "package main\n\nimport \"fmt\"\n\nfunc main() {\n\tfmt.Println(\"hello, world\", `raw`, 0x1f, 'c') // hi\n\tvar m map[string]any; _ = len(m)\n}\n",
		"README.md":     "# Title\n\nSome *em* and **strong** text, `code`, [a link](http://x).\n\n```go\nfunc f() {}\n```\n",
		"app.py":        "def f(x):\n    return x + 1  # one\nprint(f'{f(2)}')\n",
		"index.js":      "const a = [1, 2].map((x) => x * 2);\nconsole.log(`${a}`);\n",
		"mod.ts":        "export interface A { b: number }\nlet c: A = { b: 3 };\n",
		"page.html":     "<html><body><script>var x = 1;</script><p class=\"a\">hi</p></body></html>\n",
		"conf.yaml":     "a: 1\nb: [x, \"y\"]\n# c\n",
		"data.json":     "{\"a\": [1, true, null]}\n",
		"run.sh":        "#!/bin/sh\nfor f in *.go; do echo \"$f\"; done\n",
		"q.sql":         "SELECT a, count(*) FROM t WHERE b = 'x' GROUP BY a;\n",
		"lib.rs":        "fn main() { let v: Vec<i32> = vec![1]; println!(\"{:?}\", v); }\n",
		"Dockerfile":    "FROM golang:1.26\nRUN go build ./...\n",
		"style.css":     "a { color: #fff; }\n",
		"Makefile":      "all:\n\tgo test ./...\n",
		"settings.toml": "[a]\nb = 1\n",
		// Lexers derived by the generator (see derive), on text without
		// the constructs TestFallbackDifferences lists.
		"page.html.erb": "<p class=\"a\"><%= @x %></p>\n<%# c %>\n",
		"index.phtml":   "<p class=\"a\"><?php echo $x; ?></p>\n",
		"App.svelte":    "<script>let x = 1;</script>\n<p class=\"a\">{x}</p>\n",
		"top.sls":       "a: {{ b }}\nc: 1\n{% if d %}\ne: f\n{% endif %}\n",
		"Main.hx":       "class A {\n  static function main() { trace(\"hi\"); }\n}\n",
		"doc.rst":       "Title\n=====\n\nSome *em* and ``code``.\n",
		"f.lisp":        "(foo \"s\" 1 :k) ; c\n",
		"init.el":       "(foo \"s\" 1 :k) ; c\n",
	}
	for name, text := range samples {
		want := chroma.Coalesce(lexers.Match(name))
		l := Match(name)
		if want == nil || l == nil {
			t.Errorf("%s: chroma's lexer %v, ours %v", name, want, l)
			continue
		}
		if got, want := tokens(t, chroma.Coalesce(l), text), tokens(t, want, text); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: tokens differ\n got %v\nwant %v", name, got, want)
		}
	}
	// Derived lexers chroma matches by no file name.
	for name, text := range map[string]string{
		"Go HTML Template": "<p class=\"a\">{{ .X }}</p>\n",
		"HTTP":             "GET /a HTTP/1.1\nHost: x\n  y\n\n",
	} {
		if got, want := tokens(t, chroma.Coalesce(Registry().Get(name)), text), tokens(t, chroma.Coalesce(lexers.Get(name)), text); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: tokens differ\n got %v\nwant %v", name, got, want)
		}
	}
	if l := Match("notes.unknown-extension-xyz"); l != nil {
		t.Errorf("an unknown extension matched %s", l.Config().Name)
	}
}

// TestFallbackDifferences lists, one per derived lexer, the constructs
// where ours and chroma's tokens differ because of what derive
// approximates (README, "Diffs"): ours gives the token "ours" where
// chroma gives "chroma". When chroma changes one of these lexers, this
// says which difference went away or moved.
func TestFallbackDifferences(t *testing.T) {
	for _, c := range []struct {
		lexer, text  string
		ours, chroma chroma.Token
	}{
		// Go: a raw string is one String; chroma lexes {{ }} inside it as
		// a Go template (UsingLexer).
		{"Go", "var s = `a {{.X}} b`\n", chroma.Token{Type: chroma.LiteralString, Value: "`a {{.X}} b`"}, chroma.Token{Type: chroma.CommentPreproc, Value: "{{"}},
		// Haxe: the preprocessor condition after #if is code; chroma's Go
		// mutator keeps it in the directive.
		{"Haxe", "#if js\nvar x = 1;\n#end\n", chroma.Token{Type: chroma.CommentPreproc, Value: "#if"}, chroma.Token{Type: chroma.CommentPreproc, Value: "#if js"}},
		// HTTP: the body is Generic; chroma lexes it by its Content-Type.
		{"HTTP", "POST /a HTTP/1.1\nContent-Type: application/json\n\n{\"a\": 1}\n", chroma.Token{Type: chroma.Generic, Value: "{\"a\": 1}\n"}, chroma.Token{Type: chroma.NameTag, Value: `"a"`}},
		// reStructuredText: a code-block directive is Text; chroma's Go
		// emitter lexes the code in its language.
		{"reStructuredText", ".. code-block:: python\n\n   x = 1\n\n", chroma.Token{Type: chroma.Text, Value: ".. code-block:: python\n\n   x = 1\n\n"}, chroma.Token{Type: chroma.Keyword, Value: "python"}},
		// Common Lisp, EmacsLisp: no TypeRemappingLexer, so symbols chroma
		// remaps to builtins stay variables.
		{"Common Lisp", "(defun f)\n", chroma.Token{Type: chroma.NameVariable, Value: "defun"}, chroma.Token{Type: chroma.NameBuiltin, Value: "defun"}},
		{"EmacsLisp", "(setq y 1)\n", chroma.Token{Type: chroma.NameVariable, Value: "setq"}, chroma.Token{Type: chroma.NameBuiltin, Value: "setq"}},
		// markdown: YAML front matter is text; chroma's wrapper lexes it
		// as YAML (a diff line alone is never a whole front matter).
		{"markdown", "---\na: 1\n---\n# T\n", chroma.Token{Type: chroma.Text, Value: "---\na: 1\n---\n"}, chroma.Token{Type: chroma.NameTag, Value: "a"}},
		// ERB (and the other template lexers): a template tag inside a
		// <script> is in the JavaScript HTML hands the script to; chroma
		// cuts the template out first.
		{"ERB", "<script>var n = <%= @posts %>;</script>\n", chroma.Token{Type: chroma.Error, Value: "@"}, chroma.Token{Type: chroma.NameVariableInstance, Value: "@posts"}},
		// YAML+Jinja: likewise a tag inside a plain scalar is part of it.
		{"YAML+Jinja", "e: f{% endif %}\n", chroma.Token{Type: chroma.Literal, Value: "f{% endif %}"}, chroma.Token{Type: chroma.Keyword, Value: "endif"}},
	} {
		ours := tokens(t, chroma.Coalesce(Registry().Get(c.lexer)), c.text)
		theirs := tokens(t, chroma.Coalesce(lexers.Get(c.lexer)), c.text)
		if !slices.Contains(ours, c.ours) || slices.Contains(theirs, c.ours) {
			t.Errorf("%s %q: ours should have %v and chroma's not\n ours %v\nchroma %v", c.lexer, c.text, c.ours, ours, theirs)
		}
		if !slices.Contains(theirs, c.chroma) || slices.Contains(ours, c.chroma) {
			t.Errorf("%s %q: chroma's should have %v and ours not\n ours %v\nchroma %v", c.lexer, c.text, c.chroma, ours, theirs)
		}
	}
	// Raku is left out by the generator (its rules need Go mutators):
	// plain text.
	if l := Registry().Get("Raku"); l != nil && l.Config().Name == "Raku" {
		t.Errorf("Raku is in the registry; the generator left it out")
	}
}

func tokens(t *testing.T, l chroma.Lexer, text string) []chroma.Token {
	t.Helper()
	it, err := l.Tokenise(nil, text)
	if err != nil {
		t.Fatal(err)
	}
	return it.Tokens()
}

// TestBinaryLinksNoChromaRegistry keeps chroma's lexers and styles
// packages out of the lockstep binary: their initialisers would run
// before main in every command, client commands included.
func TestBinaryLinksNoChromaRegistry(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/lockstep-hq/lockstep/cmd/lockstep").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 100 {
		t.Fatalf("go list -deps listed %d packages", len(deps))
	}
	for _, d := range deps {
		switch d {
		case "github.com/alecthomas/chroma/v2/lexers", "github.com/alecthomas/chroma/v2/styles":
			t.Errorf("cmd/lockstep links %s: use web/syntax (its registry is built on first use)", d)
		}
	}
}

// BenchmarkLoad is the one-time cost moved from every command's start to
// the first highlight of a server process: building the registry.
func BenchmarkLoad(b *testing.B) {
	for b.Loop() {
		load(lexersZip)
	}
}

// BenchmarkHighlightGoLine tokenises one line of Go (the review pages
// highlight each diff line alone).
func BenchmarkHighlightGoLine(b *testing.B) {
	l := chroma.Coalesce(Match("x.go"))
	for b.Loop() {
		it, err := l.Tokenise(nil, "\tfmt.Println(\"hello, world\", len(m)) // hi")
		if err != nil {
			b.Fatal(err)
		}
		it.Tokens()
	}
}
