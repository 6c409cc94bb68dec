// Package kube decodes Kubernetes manifests the way the API server's
// strict field validation does, into the real API types.
package kube

import (
	"bytes"
	"fmt"

	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// DecodeStrict decodes one YAML document into dst: duplicate keys, unknown
// fields and fields spelt in the wrong case are errors.
func DecodeStrict(doc []byte, dst any) error {
	js, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return err
	}
	strict, err := kjson.UnmarshalStrict(js, dst)
	if err != nil {
		return err
	}
	if len(strict) > 0 {
		return fmt.Errorf("strict decoding: %v", strict)
	}
	return nil
}

// TypeMeta is a document's apiVersion and kind.
type TypeMeta struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
}

// Kind reads a document's apiVersion and kind, as "apps/v1 Deployment".
func Kind(doc []byte) (string, error) {
	var m TypeMeta
	if err := yaml.Unmarshal(doc, &m); err != nil {
		return "", err
	}
	return m.APIVersion + " " + m.Kind, nil
}

// SplitDocs splits a multi-document YAML file at its "---" lines and
// drops empty documents.
func SplitDocs(data []byte) [][]byte {
	var docs [][]byte
	for _, d := range bytes.Split(append([]byte("\n"), data...), []byte("\n---")) {
		if len(bytes.TrimSpace(stripComments(d))) > 0 {
			docs = append(docs, d)
		}
	}
	return docs
}

func stripComments(d []byte) []byte {
	var out []byte
	for _, line := range bytes.Split(d, []byte("\n")) {
		if t := bytes.TrimSpace(line); len(t) > 0 && t[0] != '#' {
			out = append(out, line...)
			out = append(out, '\n')
		}
	}
	return out
}
