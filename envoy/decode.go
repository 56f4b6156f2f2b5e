package envoy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// SplitYAML splits a multi-document YAML stream at its "---" separators
// and drops documents that hold nothing but comments and blank lines.
func SplitYAML(data []byte) ([][]byte, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var docs [][]byte
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("split yaml: %w", err)
		}
		var v any
		if err := yaml.Unmarshal(doc, &v); err != nil {
			return nil, fmt.Errorf("yaml document %d: %w", len(docs)+1, err)
		}
		if v != nil {
			docs = append(docs, doc)
		}
	}
}

// strictJSON rejects unknown fields and resolves Any types from the global
// registry (filled by the blank imports in types.go).
var strictJSON = protojson.UnmarshalOptions{DiscardUnknown: false}

// DecodeProto decodes one YAML or JSON document into m. Unknown fields,
// duplicate keys, bad enum names and unregistered Any types are errors.
// It does not run validation rules; see ValidateDeep.
func DecodeProto(doc []byte, m proto.Message) error {
	js, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return fmt.Errorf("yaml: %w", err)
	}
	if err := strictJSON.Unmarshal(js, m); err != nil {
		return fmt.Errorf("decode %s: %w", m.ProtoReflect().Descriptor().FullName(), err)
	}
	return nil
}

// DecodeBootstrap decodes a standalone Envoy bootstrap strictly and
// validates it deeply (ValidateDeep). The semantic checks are separate:
// see CheckBootstrap.
func DecodeBootstrap(doc []byte) (*bootstrapv3.Bootstrap, error) {
	b := new(bootstrapv3.Bootstrap)
	if err := DecodeProto(doc, b); err != nil {
		return nil, err
	}
	if err := ValidateDeep(b); err != nil {
		return nil, err
	}
	return b, nil
}

// validator is what protoc-gen-validate generates for every Envoy message.
type validator interface{ ValidateAll() error }

// ValidateDeep runs m's validation rules and then those of every message
// packed in a google.protobuf.Any anywhere below it, which m's own
// ValidateAll does not reach. An Any whose type is not registered is an
// error. All problems are returned, joined.
func ValidateDeep(m proto.Message) error {
	var errs []error
	validateTree(m.ProtoReflect(), string(m.ProtoReflect().Descriptor().Name()), &errs)
	return errors.Join(errs...)
}

// validateTree validates the message at path with its own rules, then
// walks it for Any values, each of which starts a new tree.
func validateTree(m protoreflect.Message, path string, errs *[]error) {
	if v, ok := m.Interface().(validator); ok {
		if err := v.ValidateAll(); err != nil {
			*errs = append(*errs, fmt.Errorf("%s: %w", path, err))
		}
	}
	walkAnys(m, path, errs)
}

// walkAnys finds every Any below m (m itself excluded) and validates the
// message it carries.
func walkAnys(m protoreflect.Message, path string, errs *[]error) {
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if fd.Kind() != protoreflect.MessageKind && fd.Kind() != protoreflect.GroupKind {
			return true
		}
		name := path + "." + string(fd.Name())
		switch {
		case fd.IsList():
			l := v.List()
			for i := 0; i < l.Len(); i++ {
				visit(l.Get(i).Message(), fmt.Sprintf("%s[%d]", name, i), errs)
			}
		case fd.IsMap():
			if fd.MapValue().Kind() != protoreflect.MessageKind {
				return true
			}
			v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				visit(mv.Message(), fmt.Sprintf("%s[%v]", name, k.Interface()), errs)
				return true
			})
		default:
			visit(v.Message(), name, errs)
		}
		return true
	})
}

// visit descends into a plain message, or unpacks and validates an Any.
func visit(m protoreflect.Message, path string, errs *[]error) {
	a, ok := m.Interface().(*anypb.Any)
	if !ok {
		walkAnys(m, path, errs)
		return
	}
	inner, err := a.UnmarshalNew()
	if err != nil {
		*errs = append(*errs, fmt.Errorf("%s: unpack %s: %w", path, a.GetTypeUrl(), err))
		return
	}
	validateTree(inner.ProtoReflect(), path+"<"+string(inner.ProtoReflect().Descriptor().Name())+">", errs)
}

// Unpack returns the message packed in a, typed as T, or an error naming
// the type found instead.
func Unpack[T proto.Message](a *anypb.Any) (T, error) {
	var zero T
	if a == nil {
		return zero, errors.New("typed_config is missing")
	}
	m, err := a.UnmarshalNew()
	if err != nil {
		return zero, fmt.Errorf("unpack %s: %w", a.GetTypeUrl(), err)
	}
	t, ok := m.(T)
	if !ok {
		return zero, fmt.Errorf("typed_config is %s, want %s", m.ProtoReflect().Descriptor().FullName(),
			zero.ProtoReflect().Descriptor().FullName())
	}
	return t, nil
}
