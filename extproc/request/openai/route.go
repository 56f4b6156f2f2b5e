package openai

import "strings"

// Kind names an admission route.
type Kind uint8

// Admission routes.
const (
	// KindCompletions is POST /v1/completions.
	KindCompletions Kind = iota + 1
	// KindChatCompletions is POST /v1/chat/completions.
	KindChatCompletions
	// KindEmbeddings is POST /v1/embeddings.
	KindEmbeddings
	// KindResponses is POST /v1/responses.
	KindResponses
	// KindGenerate is SGLang's native POST /generate.
	KindGenerate
)

// Kinds lists every admission route kind.
var Kinds = []Kind{KindCompletions, KindChatCompletions, KindEmbeddings, KindResponses, KindGenerate}

// String returns the route's path.
func (k Kind) String() string {
	switch k {
	case KindCompletions:
		return "/v1/completions"
	case KindChatCompletions:
		return "/v1/chat/completions"
	case KindEmbeddings:
		return "/v1/embeddings"
	case KindResponses:
		return "/v1/responses"
	case KindGenerate:
		return "/generate"
	}
	return "unknown"
}

// RouteKind reports whether method and path (the :method and :path pseudo
// headers) name an admission route, and which. A query string is ignored;
// the path must otherwise match exactly.
func RouteKind(method, path string) (Kind, bool) {
	if method != "POST" {
		return 0, false
	}
	if i := strings.IndexByte(path, '?'); i >= 0 {
		path = path[:i]
	}
	switch path {
	case "/v1/completions":
		return KindCompletions, true
	case "/v1/chat/completions":
		return KindChatCompletions, true
	case "/v1/embeddings":
		return KindEmbeddings, true
	case "/v1/responses":
		return KindResponses, true
	case "/generate":
		return KindGenerate, true
	}
	return 0, false
}
