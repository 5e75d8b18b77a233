package syntax

import (
	"archive/zip"
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/alecthomas/chroma/v2"
	chromahtml "github.com/alecthomas/chroma/v2/formatters/html"
	"github.com/alecthomas/chroma/v2/lexers"
	"github.com/alecthomas/chroma/v2/styles"
)

var update = flag.Bool("update", false, "rewrite lexers.zip and highlight.css from chroma")

// generate serialises every lexer of chroma's registry that can be
// serialised (those written in Go with custom functions cannot: they
// are listed in skipped) and the "github" stylesheet.
func generate(t *testing.T) (zipped []byte, files map[string][]byte, css []byte, skipped []string) {
	t.Helper()
	files = map[string][]byte{}
	for _, l := range lexers.GlobalLexerRegistry.Lexers {
		rl := regexLexer(l)
		if rl == nil {
			skipped = append(skipped, l.Config().Name)
			continue
		}
		data, err := marshal(rl)
		if err != nil {
			skipped = append(skipped, l.Config().Name)
			continue
		}
		name := strings.ToLower(strings.NewReplacer("/", "_", " ", "_", "+", "plus", "#", "sharp").Replace(rl.Config().Name)) + ".xml"
		if _, dup := files[name]; dup {
			t.Fatalf("two lexers serialise to %s", name)
		}
		files[name] = data
	}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	var zb bytes.Buffer
	zw := zip.NewWriter(&zb)
	for _, n := range names {
		w, err := zw.CreateHeader(&zip.FileHeader{Name: n, Method: zip.Deflate}) // no time: reproducible
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
	var cb bytes.Buffer
	if err := chromahtml.New(chromahtml.WithClasses(true)).WriteCSS(&cb, styles.Get("github")); err != nil {
		t.Fatal(err)
	}
	return zb.Bytes(), files, cb.Bytes(), skipped
}

// regexLexer returns the RegexLexer of l, or of the lexer a wrapper
// embeds (chroma's markdown lexer wraps one to colour a YAML front
// matter, which a diff highlighted line by line never shows whole).
func regexLexer(l chroma.Lexer) *chroma.RegexLexer {
	if rl, ok := l.(*chroma.RegexLexer); ok {
		return rl
	}
	v := reflect.ValueOf(l)
	if v.Kind() == reflect.Pointer && v.Elem().Kind() == reflect.Struct {
		if f := v.Elem().FieldByName("Lexer"); f.IsValid() && f.CanInterface() {
			if rl, ok := f.Interface().(*chroma.RegexLexer); ok {
				return rl
			}
		}
	}
	return nil
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
	zipped, files, css, skipped := generate(t)
	t.Logf("%d lexers serialised; not serialisable (plain text in the UI, but for Go: golang.go): %s", len(files), strings.Join(skipped, ", "))
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
	if got, want := len(Registry().Lexers), len(files)+1; got != want { // + Go
		t.Errorf("registry has %d lexers, want %d", got, want)
	}
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
	if l := Match("notes.unknown-extension-xyz"); l != nil {
		t.Errorf("an unknown extension matched %s", l.Config().Name)
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
