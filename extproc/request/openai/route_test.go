package openai

import "testing"

func TestRouteKind(t *testing.T) {
	for _, tc := range []struct {
		method, path string
		want         Kind
		ok           bool
	}{
		{"POST", "/v1/completions", KindCompletions, true},
		{"POST", "/v1/chat/completions", KindChatCompletions, true},
		{"POST", "/v1/chat/completions?api-version=2024-01-01", KindChatCompletions, true},
		{"POST", "/v1/embeddings", KindEmbeddings, true},
		{"POST", "/v1/responses", KindResponses, true},
		{"POST", "/generate", KindGenerate, true},
		{"POST", "/generate?", KindGenerate, true},
		{"GET", "/v1/chat/completions", 0, false},
		{"post", "/v1/completions", 0, false},
		{"POST", "/v1/models", 0, false},
		{"POST", "/v1/chat/completions/", 0, false},
		{"POST", "/v1/completions/extra", 0, false},
		{"POST", "", 0, false},
		{"GET", "/healthz", 0, false},
	} {
		got, ok := RouteKind(tc.method, tc.path)
		if got != tc.want || ok != tc.ok {
			t.Errorf("RouteKind(%q, %q) = %v, %v; want %v, %v", tc.method, tc.path, got, ok, tc.want, tc.ok)
		}
	}
}

func TestKindString(t *testing.T) {
	for _, k := range Kinds {
		got, ok := RouteKind("POST", k.String())
		if !ok || got != k {
			t.Errorf("RouteKind(POST, %q) = %v, %v; want %v", k.String(), got, ok, k)
		}
	}
	if Kind(0).String() != "unknown" {
		t.Errorf("Kind(0).String() = %q", Kind(0).String())
	}
}
