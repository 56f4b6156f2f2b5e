// Package tokenize turns prompt text into token counts, and token ids where
// an exact tokenizer is configured, for admission cost and prefix hashing.
// It implements the --tokenizer modes:
//
//   - estimate (the default): no ids; the count is the text's length over a
//     bytes-per-token ratio that starts at DefaultBytesPerToken and is
//     calibrated online, per model, from the prompt_tokens that workers
//     report (Observe).
//   - tiktoken:<encoding>: OpenAI's BPE encodings (cl100k_base, o200k_base,
//     p50k_base, r50k_base), with ranks from the files embedded by the
//     tiktoken-go loader; no network access ever. Ids equal tiktoken's
//     (tests hold them to tiktoken-go).
//   - hf:<path>: a Hugging Face model directory (HFModel: tokenizer.json,
//     tokenizer_config.json's special tokens, add_bos_token/add_eos_token
//     and chat template, chat_template.jinja), or a bare tokenizer.json.
//     Chat requests render the model's Jinja chat template (ChatTemplate,
//     with github.com/ardanlabs/jinja) and encode it without adding
//     special tokens (EncodePrompt). The tokenizer.json has a BPE model: byte-level
//     BPE (GPT-2, Llama 3, Qwen, DeepSeek, gpt-oss style: ByteLevel and
//     Split pre-tokenizers) and character BPE with byte fallback (Llama 2
//     and Mistral style: Metaspace, or Prepend and Replace normalizers),
//     with added and special tokens and the post-processor's special
//     tokens. Files using other models or components fail to load with an
//     error that names the component.
//
// Both exact modes run on one BPE engine: pieces are merged lowest rank
// first, leftmost among equals, in O(n log n), and short pieces are cached
// per worker buffer. The split patterns of GPT-2, cl100k (Llama 3), Qwen 2,
// o200k and DeepSeek V3 (whose Sequence of three splits runs fused, in one
// pass) have hand-written matchers that a differential test and a fuzz
// target hold to the regexp engine; other patterns use the regexp engine.
//
// Chat templates are programs the request drives, and some cost more than
// their input (DeepSeek V3's concatenates every system message onto one
// string). Each template is compiled metered (meterTemplate): a render
// counts its loop iterations and the values it sets and prints, and stops
// with a *BudgetError past a fixed multiple of its input's size
// (RenderStepsPerByte, RenderBytesPerByte). Rendering and encoding take a
// context (EncodePromptContext) and stop soon after it is done.
//
// Mapping serves each model with its own tokenizer (--model-tokenizer) and
// the rest with a default (--tokenizer).
//
// Every Tokenizer is safe for concurrent use: the stream goroutines share
// one. Loading is the only slow step (o200k_base takes about a second).
package tokenize
