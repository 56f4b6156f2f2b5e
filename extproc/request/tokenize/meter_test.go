package tokenize

import (
	"context"
	"testing"

	"github.com/ardanlabs/jinja"
)

// TestMeterTemplate pins the rewrite: only set values, printed
// expressions and loop iterables are wrapped, and only inside their tags.
func TestMeterTemplate(t *testing.T) {
	for _, tc := range []struct{ src, want string }{
		{`{{ m.content }}`, `{{ __tollgate_print( m.content ) }}`},
		{`{{- m.content -}}`, `{{- __tollgate_print( m.content ) -}}`},
		{`{{ 'lit' }}{{ "x" }}`, `{{ 'lit' }}{{ "x" }}`},
		{`{{ 'a' + b }}`, `{{ __tollgate_print( 'a' + b ) }}`},
		{`{{ a, b }}`, `{{ a, b }}`},
		{`{% set x = a + b %}`, `{% set x = __tollgate_set( a + b) %}`},
		{`{%- set ns.s = ns.s + '\n\n' + m['content'] -%}`, `{%- set ns.s = __tollgate_set( ns.s + '\n\n' + m['content']) -%}`},
		{`{% set x = a == b %}`, `{% set x = __tollgate_set( a == b) %}`},
		{`{% set x %}{{ y }}{% endset %}`, `{% set x %}{{ __tollgate_print( y ) }}{% endset %}`},
		{`{% for m in messages %}{% endfor %}`, `{% for m in __tollgate_loop( messages)  %}{% endfor %}`},
		{`{% for k, v in d.items() if v recursive %}`, `{% for k, v in __tollgate_loop( d.items() ) if v recursive %}`},
		{`{% for m in messages[1:] if m.role != 'x' %}`, `{% for m in __tollgate_loop( messages[1:] ) if m.role != 'x' %}`},
		{`{% if a %}{% elif b %}{% endif %}`, `{% if a %}{% elif b %}{% endif %}`},
		{`{# {{ x }} #}`, `{# {{ x }} #}`},
		{`{% raw %}{{ x }}{% set y = 1 %}{% endraw %}{{ x }}`, `{% raw %}{{ x }}{% set y = 1 %}{% endraw %}{{ __tollgate_print( x ) }}`},
		{`{{ '}}' + x }}`, `{{ __tollgate_print( '}}' + x ) }}`},
		{`{% set x = "%}" %}`, `{% set x = "%}" %}`},
		{`{% macro f(a, b=1) %}{{ a }}{% endmacro %}`, `{% macro f(a, b=1) %}{{ __tollgate_print( a ) }}{% endmacro %}`},
		{`{{ unclosed`, `{{ unclosed`},
	} {
		if got := meterTemplate(tc.src); got != tc.want {
			t.Errorf("meterTemplate(%q)\n got %q\nwant %q", tc.src, got, tc.want)
		}
	}
}

// TestMeterTemplate_SameOutput: metered templates render what the plain
// ones render, whitespace control included.
func TestMeterTemplate_SameOutput(t *testing.T) {
	messages := `[{"role":"system","content":"s"},{"role":"user","content":"u1"},{"role":"assistant","content":"a"},{"role":"user","content":"u2"}]`
	for _, src := range []string{
		"{% for m in messages %}\n  {{- m.role }}: {{ m.content }}\n{% endfor %}",
		"{%- set ns = namespace(s='') %}{% for m in messages if m.role != 'system' %}{% set ns.s = ns.s ~ m.content %}{% endfor %}[{{ ns.s }}]",
		"{% for m in messages %}{% if loop.first %}{{ m.content | upper }}{% else %} {{ loop.index }}{% endif %}{% endfor %}",
		"{% macro say(m) %}<{{ m.role }}>{% endmacro %}{% for m in messages %}{{ say(m) }}{% endfor %}",
		"{% set x %}{% for m in messages %}{{ m.content }},{% endfor %}{% endset %}{{ x | trim(',') }}",
		"{% raw %}{{ not a tag }}{% endraw %} {{ messages | length }}",
		"{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }};{% endfor %}",
		"{{ messages[0] }}",
		"{% for c in 'abc' %}{{ c }}{% endfor %}",
	} {
		plain, err := jinja.Compile(src)
		if err != nil {
			t.Fatalf("%q: %v", src, err)
		}
		metered, err := jinja.Compile(meterTemplate(src))
		if err != nil {
			t.Fatalf("%q metered: %v", src, err)
		}
		c := &ChatTemplate{vars: map[string]jinja.Value{}}
		c.tmpl = plain
		want, _, err := c.RenderContext(context.Background(), []byte(messages), nil)
		if err != nil {
			t.Fatalf("%q: %v", src, err)
		}
		c.tmpl = metered
		got, cost, err := c.RenderContext(context.Background(), []byte(messages), nil)
		if err != nil || got != want {
			t.Errorf("%q: metered %q (%v), plain %q", src, got, err, want)
		}
		if cost.Steps == 0 {
			t.Errorf("%q: nothing metered", src)
		}
	}
}

// TestRenderCost: what the meter counts for a known template.
func TestRenderCost(t *testing.T) {
	c, err := NewChatTemplate("{% set ns = namespace(s='') %}{% for m in messages %}{% set ns.s = ns.s + m.content %}{% endfor %}{{ ns.s }}{{ messages }}", nil)
	if err != nil {
		t.Fatal(err)
	}
	msgs := `[{"role":"user","content":"aaaa"},{"role":"user","content":"bb"}]`
	_, cost, err := c.RenderContext(context.Background(), []byte(msgs), nil)
	if err != nil {
		t.Fatal(err)
	}
	// Steps: the namespace set, the loop and its 2 iterations, 2 sets, 2
	// prints. Bytes: the namespace (1 item), "aaaa" and "aaaabb", the
	// printed "aaaabb", the printed list: 1 + 2 × (1 + "role" 4 + "user"
	// 4 + "content" 7 + content).
	wantSteps, wantBytes := int64(1+3+2+2), int64(1+4+6+6+1+2*16+4+2)
	if cost.Steps != wantSteps || cost.Bytes != wantBytes {
		t.Errorf("cost %+v, want steps %d bytes %d", cost, wantSteps, wantBytes)
	}
}
