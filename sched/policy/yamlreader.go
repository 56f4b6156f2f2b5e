package policy

import (
	"errors"
	"regexp"
	"strconv"

	"go.yaml.in/yaml/v3"
)

// YAMLReader reads a YAML document node by node by the rules the policy
// files are read by: exactly one document, aliases followed within a work
// bound, merge keys, non-string keys and duplicate keys rejected, unknown
// keys named along with the valid ones, integers never taken from floats
// or strings. Every problem is a *DecodeError with its line and column
// (and an empty Path: the caller names the place in its own words).
//
// Unlike the policy files, which stop at the first problem (upstream's
// order), a YAMLReader reports every problem it finds, so that a file's
// problems can all be listed in one run. tollgate's own files, such as the
// workers file, are read with it.
//
// A YAMLReader is not safe for concurrent use.
type YAMLReader struct {
	d *decoder
}

// ReadYAML parses data as exactly one YAML document. It returns a reader
// for the document and its root node, nil when data holds no document or
// only a null one. A syntax error is a *DecodeError with the line the
// parser names (and no column).
func ReadYAML(data []byte) (*YAMLReader, *yaml.Node, error) {
	root, err := parseDocument(data)
	if err != nil {
		if _, ok := errors.AsType[*DecodeError](err); !ok {
			err = syntaxError(err)
		}
		return nil, nil, err
	}
	return &YAMLReader{d: newDecoder()}, root, nil
}

// syntaxLine matches the line a syntax error names, as yamlError leaves it.
var syntaxLine = regexp.MustCompile(`^line (\d+): (.*)$`)

// syntaxError turns a parser error that names its line into a DecodeError.
func syntaxError(err error) error {
	m := syntaxLine.FindStringSubmatch(err.Error())
	if m == nil {
		return &DecodeError{Msg: err.Error()}
	}
	line, _ := strconv.Atoi(m[1])
	return &DecodeError{Line: line, Msg: m[2]}
}

// YAMLField is one known key of a mapping that YAMLReader.Object read.
type YAMLField struct {
	Key     string
	KeyNode *yaml.Node
	// Value is the value, with aliases followed; nil when it is null, which
	// reads as an absent key, as the policy files' optional fields do.
	Value *yaml.Node
}

// Object reads n as a mapping whose keys must all be in known; a null n
// reads as an empty mapping. It returns the known keys it could read, in
// document order, and every problem: n not a mapping, a merge, non-string
// or duplicate key, a key not in known (named with the known ones), a
// value whose alias cannot be followed.
func (r *YAMLReader) Object(n *yaml.Node, known []string) ([]YAMLField, []error) {
	_, entries, problems := r.d.objectAll(n, "", known)
	fields := make([]YAMLField, 0, len(entries))
	for _, e := range entries {
		v, err := r.d.deref(e.valueRaw, "")
		if err != nil {
			problems = append(problems, err)
			continue
		}
		if isNull(v) {
			v = nil
		}
		fields = append(fields, YAMLField{Key: e.key, KeyNode: e.keyNode, Value: v})
	}
	return fields, problems
}

// Sequence reads n as a sequence and returns its items.
func (r *YAMLReader) Sequence(n *yaml.Node) ([]*yaml.Node, error) {
	return r.d.sequence(n, "")
}

// String reads a string. As in the policy files, any plain scalar but
// null reads as its text: `id: 7` is the string "7".
func (r *YAMLReader) String(n *yaml.Node) (string, error) {
	return r.d.str(n, "")
}

// Uint reads an integer in [lo, hi]. Floats (even integral ones),
// strings and integers out of the range are problems that name the range.
func (r *YAMLReader) Uint(n *yaml.Node, lo, hi uint64) (uint64, error) {
	n, err := r.d.deref(n, "")
	if err != nil {
		return 0, err
	}
	want := "an integer in [" + strconv.FormatUint(lo, 10) + ", " + strconv.FormatUint(hi, 10) + "]"
	if n.Kind != yaml.ScalarNode || n.ShortTag() != tagInt {
		return 0, r.d.errorf(n, "", "invalid type: %s, expected %s", describe(n), want)
	}
	var u uint64
	if err := n.Decode(&u); err != nil || u < lo || u > hi {
		return 0, r.d.errorf(n, "", "invalid value: integer %s, expected %s", n.Value, want)
	}
	return u, nil
}
