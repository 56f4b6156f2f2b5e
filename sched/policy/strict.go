package policy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// maxNodeVisits bounds the work one document may cause, counting every node
// the decoder visits after alias expansion. It stops alias "billion laughs"
// documents long before they cost real time or memory.
const maxNodeVisits = 1 << 20

// YAML short tags the strict decoder distinguishes.
const (
	tagNull      = "!!null"
	tagBool      = "!!bool"
	tagStr       = "!!str"
	tagInt       = "!!int"
	tagFloat     = "!!float"
	tagTimestamp = "!!timestamp"
)

// DecodeError is a schema error found while walking a YAML document: where
// it is (a dotted path from the document root, and the line and column) and
// what is wrong with it. Path is empty for the problems YAMLReader reports;
// Column is 0 when only the line is known (a syntax error).
type DecodeError struct {
	Path         string
	Line, Column int
	Msg          string
}

func (e *DecodeError) Error() string {
	var b strings.Builder
	if e.Path != "" {
		b.WriteString(e.Path)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	switch {
	case e.Line > 0 && e.Column > 0:
		fmt.Fprintf(&b, " at line %d column %d", e.Line, e.Column)
	case e.Line > 0:
		fmt.Fprintf(&b, " at line %d", e.Line)
	}
	return b.String()
}

// decoder walks a yaml.Node tree against a fixed schema. Unlike decoding into
// Go structs it keeps what the files' contracts need: integer and float
// scalars stay distinct, unknown and duplicate keys are errors that name the
// key, sequence order is preserved, and every error carries its position.
type decoder struct {
	// visits counts dereferenced nodes; past limit decoding fails.
	visits, limit int
}

// newDecoder returns a decoder with the default work bound.
func newDecoder() *decoder { return &decoder{limit: maxNodeVisits} }

// parseDocument parses exactly one YAML document and returns its root node,
// or nil when the input holds no document or only a null one.
func parseDocument(data []byte) (*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil
		}
		return nil, yamlError(err)
	}
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case errors.Is(err, io.EOF):
	case err != nil:
		return nil, yamlError(err)
	default:
		return nil, &DecodeError{Line: extra.Line, Column: extra.Column, Msg: "more than one YAML document is not supported"}
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 {
		return nil, nil
	}
	root := doc.Content[0]
	if root.Kind == yaml.ScalarNode && root.ShortTag() == tagNull {
		return nil, nil
	}
	return root, nil
}

// yamlError strips the library's "yaml: " prefix from a syntax error.
func yamlError(err error) error {
	return errors.New(strings.TrimPrefix(err.Error(), "yaml: "))
}

func (d *decoder) errorf(n *yaml.Node, path, format string, args ...any) error {
	e := &DecodeError{Path: path, Msg: fmt.Sprintf(format, args...)}
	if n != nil {
		e.Line, e.Column = n.Line, n.Column
	}
	return e
}

// deref follows aliases to the node they name and charges the visit.
func (d *decoder) deref(n *yaml.Node, path string) (*yaml.Node, error) {
	for range 64 {
		d.visits++
		if d.visits > d.limit {
			return nil, d.errorf(n, path, "document is too large after alias expansion")
		}
		if n.Kind != yaml.AliasNode {
			return n, nil
		}
		if n.Alias == nil {
			return nil, d.errorf(n, path, "unknown anchor %q", n.Value)
		}
		n = n.Alias
	}
	return nil, d.errorf(n, path, "alias chain is too deep")
}

// isNull reports whether n (already dereferenced) is a null scalar.
func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == tagNull
}

// describe names what n is, for "invalid type" errors.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "map"
	case yaml.SequenceNode:
		return "sequence"
	case yaml.ScalarNode:
		switch tag := n.ShortTag(); tag {
		case tagNull:
			return "null"
		case tagBool:
			return "boolean " + n.Value
		case tagInt:
			return "integer " + n.Value
		case tagFloat:
			return "floating point " + n.Value
		case tagStr:
			return "string " + strconv.Quote(n.Value)
		default:
			return "value " + strconv.Quote(n.Value) + " tagged " + tag
		}
	}
	return "unsupported node"
}

// entry is one key/value pair of a mapping, in document order.
type entry struct {
	key      string
	keyNode  *yaml.Node
	valueRaw *yaml.Node
}

// mapping returns the pairs of the mapping n (null counts as empty),
// rejecting non-string and duplicate keys: the first problem mappingAll
// finds.
func (d *decoder) mapping(n *yaml.Node, path string) ([]entry, error) {
	entries, problems := d.mappingAll(n, path)
	if len(problems) > 0 {
		return nil, problems[0]
	}
	return entries, nil
}

// mappingAll returns the pairs of the mapping n (null counts as empty) and
// every problem, in document order: n not a mapping, merge keys,
// non-string keys and duplicate keys, which are left out of the pairs. An
// alias that cannot be followed ends the walk.
func (d *decoder) mappingAll(n *yaml.Node, path string) ([]entry, []error) {
	n, err := d.deref(n, path)
	if err != nil {
		return nil, []error{err}
	}
	if isNull(n) {
		return nil, nil
	}
	if n.Kind != yaml.MappingNode {
		return nil, []error{d.errorf(n, path, "invalid type: %s, expected a map", describe(n))}
	}
	var problems []error
	entries := make([]entry, 0, len(n.Content)/2)
	seen := make(map[string]bool, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, err := d.deref(n.Content[i], path)
		if err != nil {
			return entries, append(problems, err)
		}
		if k.Kind == yaml.ScalarNode && k.ShortTag() == "!!merge" {
			problems = append(problems, d.errorf(k, path, "merge keys (<<) are not supported"))
			continue
		}
		key, err := d.str(k, path)
		if err != nil {
			problems = append(problems, d.errorf(k, path, "invalid key: %s, expected a string", describe(k)))
			continue
		}
		if seen[key] {
			problems = append(problems, d.errorf(k, path, "duplicate key %q", key))
			continue
		}
		seen[key] = true
		entries = append(entries, entry{key: key, keyNode: k, valueRaw: n.Content[i+1]})
	}
	return entries, problems
}

// object is a struct-like mapping: its fields by name and the node itself,
// for "missing field" errors.
type object struct {
	node   *yaml.Node
	path   string
	fields map[string]*yaml.Node
}

// object decodes n as a mapping whose keys must all be in known: the first
// problem objectAll finds.
func (d *decoder) object(n *yaml.Node, path string, known []string) (object, error) {
	o, _, problems := d.objectAll(n, path, known)
	if len(problems) > 0 {
		return object{}, problems[0]
	}
	return o, nil
}

// objectAll decodes n as a mapping whose keys must all be in known. It
// returns the known fields, in document order too, and every problem: the
// mapping's own (mappingAll), then each unknown key, named with the known
// ones.
func (d *decoder) objectAll(n *yaml.Node, path string, known []string) (object, []entry, []error) {
	entries, problems := d.mappingAll(n, path)
	o := object{node: n, path: path, fields: make(map[string]*yaml.Node, len(entries))}
	kept := entries[:0]
	for _, e := range entries {
		if !slices.Contains(known, e.key) {
			problems = append(problems, d.errorf(e.keyNode, path, "unknown field %q, expected one of %s", e.key, strings.Join(known, ", ")))
			continue
		}
		o.fields[e.key] = e.valueRaw
		kept = append(kept, e)
	}
	return o, kept, problems
}

// optional returns the field's node, or nil when it is absent or null.
func (d *decoder) optional(o object, key string) (*yaml.Node, error) {
	n, ok := o.fields[key]
	if !ok {
		return nil, nil
	}
	n, err := d.deref(n, join(o.path, key))
	if err != nil || isNull(n) {
		return nil, err
	}
	return n, nil
}

// required returns the field's node, or a "missing field" error when the
// key is absent. A present null is left to the field's type check.
func (d *decoder) required(o object, key string) (*yaml.Node, error) {
	n, ok := o.fields[key]
	if !ok {
		return nil, d.errorf(o.node, o.path, "missing field %q", key)
	}
	return d.deref(n, join(o.path, key))
}

// sequence returns the items of the sequence n.
func (d *decoder) sequence(n *yaml.Node, path string) ([]*yaml.Node, error) {
	n, err := d.deref(n, path)
	if err != nil {
		return nil, err
	}
	if n.Kind != yaml.SequenceNode {
		return nil, d.errorf(n, path, "invalid type: %s, expected a sequence", describe(n))
	}
	return n.Content, nil
}

// str decodes a string. Any plain scalar but null reads as its text, as a
// YAML string field does: `name: 123` is the name "123".
func (d *decoder) str(n *yaml.Node, path string) (string, error) {
	n, err := d.deref(n, path)
	if err != nil {
		return "", err
	}
	if n.Kind == yaml.ScalarNode {
		switch n.ShortTag() {
		case tagStr, tagInt, tagFloat, tagBool, tagTimestamp:
			return n.Value, nil
		}
	}
	return "", d.errorf(n, path, "invalid type: %s, expected a string", describe(n))
}

// uint decodes an unsigned integer no greater than limit. Floats (even
// integral ones), negative numbers and strings are errors.
func (d *decoder) uint(n *yaml.Node, path string, limit uint64) (uint64, error) {
	n, err := d.deref(n, path)
	if err != nil {
		return 0, err
	}
	if n.Kind != yaml.ScalarNode || n.ShortTag() != tagInt {
		return 0, d.errorf(n, path, "invalid type: %s, expected an unsigned integer", describe(n))
	}
	var u uint64
	if err := n.Decode(&u); err != nil || u > limit {
		if limit == math.MaxUint64 {
			return 0, d.errorf(n, path, "invalid value: integer %s, expected an unsigned integer", n.Value)
		}
		return 0, d.errorf(n, path, "invalid value: integer %s, expected an unsigned integer <= %d", n.Value, limit)
	}
	return u, nil
}

// float decodes a number; integers are accepted. Non-finite values decode
// (".inf", ".nan") and are left to validation.
func (d *decoder) float(n *yaml.Node, path string) (float64, error) {
	n, err := d.deref(n, path)
	if err != nil {
		return 0, err
	}
	if n.Kind == yaml.ScalarNode {
		if tag := n.ShortTag(); tag == tagInt || tag == tagFloat {
			var f float64
			if err := n.Decode(&f); err == nil {
				return f, nil
			}
		}
	}
	return 0, d.errorf(n, path, "invalid type: %s, expected a number", describe(n))
}

// boolean decodes true or false.
func (d *decoder) boolean(n *yaml.Node, path string) (bool, error) {
	n, err := d.deref(n, path)
	if err != nil {
		return false, err
	}
	if n.Kind == yaml.ScalarNode && n.ShortTag() == tagBool {
		var b bool
		if err := n.Decode(&b); err == nil {
			return b, nil
		}
	}
	return false, d.errorf(n, path, "invalid type: %s, expected a boolean", describe(n))
}

// variant decodes one of a fixed set of exact, case-sensitive strings.
func (d *decoder) variant(n *yaml.Node, path string, variants []string) (string, error) {
	s, err := d.str(n, path)
	if err != nil {
		return "", err
	}
	if !slices.Contains(variants, s) {
		return "", d.errorf(n, path, "unknown variant %q, expected one of %s", s, strings.Join(variants, ", "))
	}
	return s, nil
}

// join appends a field name to a path.
func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// index appends a sequence index to a path.
func index(path string, i int) string { return path + "[" + strconv.Itoa(i) + "]" }

// keyed appends a map key to a path, quoted.
func keyed(path, key string) string { return path + "[" + strconv.Quote(key) + "]" }
