package syntax

// The Go lexer is written in Go in chroma (its raw-string rule runs the
// text/template lexer, which chroma cannot serialise), so it is built
// here from the same rules, copied from chroma v2's lexers/go.go (MIT
// licence, Copyright (C) 2017 Alec Thomas). One change: a raw string is
// one string token instead of the template lexer's remapped tokens; the
// result is the same (coalesced) unless the raw string holds `{{`.
// TestSameTokensAsChroma compares the two.

import (
	"strings"

	. "github.com/alecthomas/chroma/v2" // nolint: the rules read as chroma's
)

func goLexer() Lexer {
	return MustNewLexer(
		&Config{
			Name:      "Go",
			Aliases:   []string{"go", "golang"},
			Filenames: []string{"*.go"},
			MimeTypes: []string{"text/x-gosrc"},
		},
		goRules,
	).SetAnalyser(func(text string) float32 {
		if strings.Contains(text, "fmt.") && strings.Contains(text, "package ") {
			return 0.5
		}
		if strings.Contains(text, "package ") {
			return 0.1
		}
		return 0.0
	})
}

func goRules() Rules {
	return Rules{
		"root": {
			{Pattern: `\n`, Type: TextWhitespace},
			{Pattern: `\s+`, Type: TextWhitespace},
			{Pattern: `//[^\s\n\r][^\n\r]*`, Type: CommentPreproc},
			{Pattern: `//[^\n\r]*`, Type: CommentSingle},
			{Pattern: `/(\\\n)?[*](.|\n)*?[*](\\\n)?/`, Type: CommentMultiline},
			{Pattern: `(import|package)\b`, Type: KeywordNamespace},
			{Pattern: `(var|func|struct|map|chan|type|interface|const)\b`, Type: KeywordDeclaration},
			{Pattern: Words(``, `\b`, `break`, `default`, `select`, `case`, `defer`, `go`, `else`, `goto`, `switch`, `fallthrough`, `if`, `range`, `continue`, `for`, `return`), Type: Keyword},
			{Pattern: `(true|false|iota|nil)\b`, Type: KeywordConstant},
			{Pattern: Words(``, `\b(\()`, `uint`, `uint8`, `uint16`, `uint32`, `uint64`, `int`, `int8`, `int16`, `int32`, `int64`, `float`, `float32`, `float64`, `complex64`, `complex128`, `byte`, `rune`, `string`, `bool`, `error`, `uintptr`, `print`, `println`, `panic`, `recover`, `close`, `complex`, `real`, `imag`, `len`, `cap`, `append`, `copy`, `delete`, `new`, `make`, `clear`, `min`, `max`), Type: ByGroups(NameBuiltin, Punctuation)},
			{Pattern: Words(``, `\b`, `uint`, `uint8`, `uint16`, `uint32`, `uint64`, `int`, `int8`, `int16`, `int32`, `int64`, `float`, `float32`, `float64`, `complex64`, `complex128`, `byte`, `rune`, `string`, `bool`, `error`, `uintptr`, `any`), Type: KeywordType},
			{Pattern: `\d+i`, Type: LiteralNumber},
			{Pattern: `\d+\.\d*([Ee][-+]\d+)?i`, Type: LiteralNumber},
			{Pattern: `\.\d+([Ee][-+]\d+)?i`, Type: LiteralNumber},
			{Pattern: `\d+[Ee][-+]\d+i`, Type: LiteralNumber},
			{Pattern: `\d+(\.\d+[eE][+\-]?\d+|\.\d*|[eE][+\-]?\d+)`, Type: LiteralNumberFloat},
			{Pattern: `\.\d+([eE][+\-]?\d+)?`, Type: LiteralNumberFloat},
			{Pattern: `0[0-7]+`, Type: LiteralNumberOct},
			{Pattern: `0[xX][0-9a-fA-F_]+`, Type: LiteralNumberHex},
			{Pattern: `0b[01_]+`, Type: LiteralNumberBin},
			{Pattern: `(0|[1-9][0-9_]*)`, Type: LiteralNumberInteger},
			{Pattern: `'(\\['"\\abfnrtv]|\\x[0-9a-fA-F]{2}|\\[0-7]{1,3}|\\u[0-9a-fA-F]{4}|\\U[0-9a-fA-F]{8}|[^\\])'`, Type: LiteralStringChar},
			{Pattern: "`[^`]*`", Type: LiteralString},
			{Pattern: `"(\\\\|\\"|[^"])*"`, Type: LiteralString},
			{Pattern: `(<<=|>>=|<<|>>|<=|>=|&\^=|&\^|\+=|-=|\*=|/=|%=|&=|\|=|&&|\|\||<-|\+\+|--|==|!=|:=|\.\.\.|[+\-*/%&])`, Type: Operator},
			{Pattern: `([a-zA-Z_]\w*)(\s*)(\()`, Type: ByGroups(NameFunction, UsingSelf("root"), Punctuation)},
			{Pattern: `[|^<>=!()\[\]{}.,;:~]`, Type: Punctuation},
			{Pattern: `[^\W\d]\w*`, Type: NameOther},
		},
	}
}
