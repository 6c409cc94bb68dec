// Package envoy_test checks the Envoy configurations under envoy/ (and the
// one inside examples/sidecar) against Envoy's own API: each is decoded
// into go-control-plane's protos with every typed_config resolved, and
// validated with Envoy's protoc-gen-validate rules, recursively through
// every Any. The descriptors the configurations make Envoy send are
// derived from their rate_limits actions and matched against tokengate's
// shipped policy.
package envoy_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"

	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"

	// The extensions the configurations name in typed_config: importing
	// them registers their types, so that each Any resolves.
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/http/early_header_mutation/header_mutation/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
)

// yamlDocs reads every YAML document of a file as plain data (mappings
// with string keys), with anchors and aliases expanded.
func yamlDocs(t *testing.T, file string) []map[string]any {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return decodeDocs(t, file, data)
}

// decodeDocs reads the YAML documents of data (named name in messages)
// as yamlDocs does.
func decodeDocs(t *testing.T, name string, data []byte) []map[string]any {
	t.Helper()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var docs []map[string]any
	for {
		var doc map[string]any
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return docs
		}
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if doc != nil {
			docs = append(docs, doc)
		}
	}
}

// toJSON turns YAML-decoded data into JSON.
func toJSON(t *testing.T, v any) []byte {
	t.Helper()
	js, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("to JSON: %v", err)
	}
	return js
}

// decodeProto decodes JSON into m as Envoy does: unknown fields are
// errors, and every Any must name a registered type.
func decodeProto(js []byte, m proto.Message) error {
	return protojson.UnmarshalOptions{}.Unmarshal(js, m)
}

// decodeStrict decodes JSON into a Go struct; unknown fields are errors.
func decodeStrict(js []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

type validator interface{ ValidateAll() error }

// validate runs Envoy's protoc-gen-validate rules on m and, because those
// rules stop at an Any, on the message inside every Any, at any depth. It
// returns the type URL of every Any it opened.
func validate(m proto.Message) ([]string, error) {
	var errs []error
	var types []string
	var visit func(path string, m protoreflect.Message)
	check := func(path string, m proto.Message) {
		if v, ok := m.(validator); ok {
			if err := v.ValidateAll(); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", path, err))
			}
		}
		visit(path, m.ProtoReflect())
	}
	visit = func(path string, m protoreflect.Message) {
		if a, ok := m.Interface().(*anypb.Any); ok {
			inner, err := a.UnmarshalNew()
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", path, err))
				return
			}
			types = append(types, a.GetTypeUrl())
			check(path+"("+a.GetTypeUrl()+")", inner)
			return
		}
		m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
			p := path + "." + string(fd.Name())
			switch {
			case fd.IsList() && fd.Message() != nil:
				for i := range v.List().Len() {
					visit(fmt.Sprintf("%s[%d]", p, i), v.List().Get(i).Message())
				}
			case fd.IsMap() && fd.MapValue().Message() != nil:
				v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
					visit(fmt.Sprintf("%s[%s]", p, k.String()), mv.Message())
					return true
				})
			case !fd.IsList() && !fd.IsMap() && fd.Message() != nil:
				visit(p, v.Message())
			}
			return true
		})
	}
	check(string(m.ProtoReflect().Descriptor().Name()), m)
	return types, errors.Join(errs...)
}

// unpack returns the message inside an Any, which must hold a T.
func unpack[T proto.Message](t *testing.T, a *anypb.Any) T {
	t.Helper()
	m, err := a.UnmarshalNew()
	if err != nil {
		t.Fatal(err)
	}
	v, ok := m.(T)
	if !ok {
		t.Fatalf("%s holds %T", a.GetTypeUrl(), m)
	}
	return v
}

func repoFile(parts ...string) string {
	return filepath.Join(append([]string{".."}, parts...)...)
}
