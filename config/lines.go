package config

import (
	"strings"

	"github.com/pelletier/go-toml/v2/unstable"
)

// keyLines maps every key of a TOML document ("plugin.source") to the line
// it is set on, so that errors about a value can name its line. A document
// that does not parse yields what was read before the error. data is read
// as Decode reads it (UTF-16 and a byte order mark taken).
func keyLines(data []byte) map[string]int {
	data, _ = asUTF8(data)
	out := map[string]int{}
	p := unstable.Parser{}
	p.Reset(data)
	var table []string
	for p.NextExpression() {
		n := p.Expression()
		switch n.Kind {
		case unstable.Table, unstable.ArrayTable:
			table = keyOf(n.Key())
		case unstable.KeyValue:
			it := n.Key()
			k, first := keyParts(it)
			if first != nil { // the key's bytes are the input's: their line
				line := p.Shape(p.Range(first)).Start.Line
				out[strings.Join(append(append([]string{}, table...), k...), ".")] = line
			}
		}
	}
	return out
}

func keyOf(it unstable.Iterator) []string {
	k, _ := keyParts(it)
	return k
}

// keyParts returns a key's parts and the bytes of its first part.
func keyParts(it unstable.Iterator) ([]string, []byte) {
	var k []string
	var first []byte
	for it.Next() {
		if first == nil {
			first = it.Node().Data
		}
		k = append(k, string(it.Node().Data))
	}
	return k, first
}
