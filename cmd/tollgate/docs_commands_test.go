package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestDocs_CommandsRun runs every tollgate command in a shell block of
// README.md and docs/*.md as written, from the repository root, through
// run. A serve command would not end, so for it the test checks that the
// files it names exist and runs the same flags through check-config,
// which loads every one of them.
func TestDocs_CommandsRun(t *testing.T) {
	t.Chdir("../..")
	docs, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	ran := map[string]int{} // "README.md check-config" -> commands run
	for _, file := range append([]string{"README.md"}, docs...) {
		text, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range shellCommands(string(text)) {
			name := fmt.Sprintf("%s:%d", file, c.line)
			inv, err := parseInvocation(c.text)
			if err != nil {
				t.Errorf("%s: %v\n\t%s", name, err, c.text)
				continue
			}
			if inv == nil {
				continue // not a tollgate command (go build, make, curl, ...)
			}
			ran[file+" "+inv.command()]++
			t.Run(name, func(t *testing.T) { inv.check(t, c.text) })
		}
	}
	for _, want := range []string{"README.md check-config", "README.md serve", "docs/configuration.md check-config", "docs/tokenizers.md tokenize"} {
		if ran[want] == 0 {
			t.Errorf("found no %q command; the test may be reading the documents wrongly (found %v)", want, ran)
		}
	}
}

// check runs one invocation and fails the test when it exits non-zero or
// names a file that does not exist.
func (inv *invocation) check(t *testing.T, text string) {
	for _, p := range inv.paths() {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("names a file that does not exist from the repository root: %v\n\t%s", err, text)
		}
	}
	args := inv.args
	if inv.command() == "serve" {
		args = append([]string{"check-config"}, args[1:]...)
	}
	old := stdin
	stdin = strings.NewReader(inv.stdin)
	defer func() { stdin = old }()
	if code, out, errs := runArgs(t, args...); code != 0 {
		t.Errorf("exit status %d\n\t%s\nstdout:\n%s\nstderr:\n%s", code, text, out, errs)
	}
}

// docCommand is one command of a shell block, its continuation lines
// joined, and the line of the file where it starts.
type docCommand struct {
	line int
	text string
}

// shellLanguages are the info strings of fenced blocks that hold commands.
var shellLanguages = map[string]bool{"sh": true, "bash": true, "shell": true, "console": true}

// shellCommands returns the commands of the fenced shell blocks of a
// Markdown text. A line ending in a backslash or a pipe continues on the
// next; a leading "$ " prompt, blank lines and comment lines are dropped.
func shellCommands(markdown string) []docCommand {
	var (
		cmds    []docCommand
		inBlock bool
		shell   bool
		cur     *docCommand
	)
	for i, line := range strings.Split(markdown, "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "```") {
			if !inBlock {
				lang, _, _ := strings.Cut(strings.TrimPrefix(trimmed, "```"), " ")
				inBlock, shell = true, shellLanguages[lang]
			} else {
				inBlock, cur = false, nil
			}
			continue
		}
		if !inBlock || !shell {
			continue
		}
		if cur == nil {
			trimmed = strings.TrimPrefix(trimmed, "$ ")
			if trimmed == "" || strings.HasPrefix(trimmed, "#") {
				continue
			}
			cmds = append(cmds, docCommand{line: i + 1})
			cur = &cmds[len(cmds)-1]
		}
		switch {
		case strings.HasSuffix(trimmed, "\\"):
			cur.text += strings.TrimSuffix(trimmed, "\\")
		case strings.HasSuffix(trimmed, "|"):
			cur.text += trimmed + " "
		default:
			cur.text += trimmed
			cur = nil
		}
	}
	return cmds
}

// invocation is a tollgate command line: its arguments and what it reads
// on standard input.
type invocation struct {
	args  []string
	stdin string
}

// command is the subcommand an invocation runs: its first argument, or
// help when it asks for help. It is "" for no command, or flags with no
// command before them, which tollgate refuses (and check then reports).
func (inv *invocation) command() string {
	for _, a := range inv.args {
		if isHelpFlag(a) {
			return "help"
		}
	}
	if len(inv.args) == 0 || strings.HasPrefix(inv.args[0], "-") {
		return ""
	}
	return inv.args[0]
}

// fileFlags are the flags whose value is a file tollgate reads.
var fileFlags = map[string]bool{
	"workers": true, "router-policy-config": true, "priority-scheduler-config": true,
	"tenant-api-keys-file": true, "grpc-tls-cert": true, "grpc-tls-key": true,
	"grpc-client-ca": true, "kubeconfig": true,
}

// paths returns the files an invocation names: the values of file flags,
// and the paths of hf: tokenizer specs.
func (inv *invocation) paths() []string {
	var out []string
	for i := 0; i < len(inv.args); i++ {
		a := inv.args[i]
		if !strings.HasPrefix(a, "-") {
			continue
		}
		name, value, inline := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !inline && i+1 < len(inv.args) {
			value = inv.args[i+1]
		}
		switch {
		case fileFlags[name]:
			out = append(out, value)
		case name == "tokenizer" || name == "model-tokenizer":
			spec := value
			if _, s, ok := strings.Cut(value, "="); ok && name == "model-tokenizer" {
				spec = s
			}
			if p, ok := strings.CutPrefix(spec, "hf:"); ok {
				out = append(out, p)
			}
		}
	}
	return out
}

// parseInvocation reads one command line. It returns nil for a command
// that does not run tollgate, and an error for one the test cannot run as
// written: a variable, a substitution, a redirection other than "<", a list
// (&&, ;), or input piped from anything but echo or cat.
func parseInvocation(line string) (*invocation, error) {
	stages, err := splitPipeline(line)
	if err != nil {
		if !runsTollgate.MatchString(line) {
			return nil, nil // some other command, which this test does not run
		}
		return nil, err
	}
	last := stages[len(stages)-1]
	isTollgate := func(w []string) bool { return len(w) > 0 && (w[0] == "tollgate" || w[0] == "./tollgate") }
	for _, s := range stages[:len(stages)-1] {
		if isTollgate(s) {
			return nil, errors.New("a tollgate command whose output is piped on cannot be checked; end the pipeline with it")
		}
	}
	if !isTollgate(last) {
		return nil, nil
	}
	inv := &invocation{}
	for i := 1; i < len(last); i++ {
		if last[i] == "<" {
			if i+1 >= len(last) {
				return nil, errors.New("< names no file")
			}
			b, err := os.ReadFile(last[i+1])
			if err != nil {
				return nil, err
			}
			inv.stdin = string(b)
			i++
			continue
		}
		inv.args = append(inv.args, last[i])
	}
	if len(stages) == 2 {
		switch src := stages[0]; {
		case len(src) > 0 && src[0] == "echo":
			inv.stdin = strings.Join(src[1:], " ") + "\n"
		case len(src) == 2 && src[0] == "cat":
			b, err := os.ReadFile(src[1])
			if err != nil {
				return nil, err
			}
			inv.stdin = string(b)
		default:
			return nil, fmt.Errorf("input piped from %q: only echo and cat are supported", src)
		}
	} else if len(stages) > 2 {
		return nil, errors.New("a pipeline of more than two commands")
	}
	return inv, nil
}

// runsTollgate matches a command line that runs tollgate somewhere.
var runsTollgate = regexp.MustCompile(`(^|[|;&(]\s*)(\./)?tollgate(\s|$)`)

// splitPipeline splits a command line into the words of each pipeline
// stage, as a POSIX shell does for plain words, single and double quotes
// and backslashes. An unquoted "<" is a word of its own.
func splitPipeline(line string) ([][]string, error) {
	var (
		stages [][]string
		words  []string
		word   strings.Builder
		inWord bool
	)
	endWord := func() {
		if inWord {
			words = append(words, word.String())
			word.Reset()
			inWord = false
		}
	}
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case c == ' ' || c == '\t':
			endWord()
		case c == '#' && !inWord:
			i = len(line) // a comment runs to the end of the line
		case c == '\'':
			j := strings.IndexByte(line[i+1:], '\'')
			if j < 0 {
				return nil, errors.New("unterminated single quote")
			}
			word.WriteString(line[i+1 : i+1+j])
			inWord, i = true, i+1+j
		case c == '"':
			inWord = true
			for i++; ; i++ {
				if i >= len(line) {
					return nil, errors.New("unterminated double quote")
				}
				d := line[i]
				if d == '"' {
					break
				}
				if d == '$' || d == '`' {
					return nil, errors.New("a variable or command substitution does not run as written")
				}
				if d == '\\' && i+1 < len(line) && strings.IndexByte("\"\\", line[i+1]) >= 0 {
					i++
					d = line[i]
				}
				word.WriteByte(d)
			}
		case c == '\\':
			if i+1 < len(line) {
				i++
				word.WriteByte(line[i])
				inWord = true
			}
		case c == '$' || c == '`':
			return nil, errors.New("a variable or command substitution does not run as written")
		case c == '|':
			if i+1 < len(line) && line[i+1] == '|' {
				return nil, errors.New("|| lists are not supported")
			}
			endWord()
			if len(words) == 0 {
				return nil, errors.New("empty pipeline stage")
			}
			stages, words = append(stages, words), nil
		case c == '<':
			endWord()
			words = append(words, "<")
		case c == '>' || c == '&' || c == ';' || c == '(' || c == ')':
			return nil, fmt.Errorf("%q is not supported in a documented command", c)
		default:
			word.WriteByte(c)
			inWord = true
		}
	}
	endWord()
	if len(words) == 0 {
		return nil, errors.New("empty command")
	}
	return append(stages, words), nil
}

// TestDocs_ShellCommands checks how commands are read out of Markdown.
func TestDocs_ShellCommands(t *testing.T) {
	md := "text\n```sh\n$ make demo   # the demo\n\n" +
		"./tollgate check-config --workers examples/workers.yaml \\\n    --router-policy-config 'examples/a b.yaml'\n" +
		"echo '{\"model\":\"m\"}' |\n  ./tollgate tokenize --model-tokenizer m=hf:/models/m\n```\n" +
		"```text\ntollgate serve --workers nowhere.yaml\n```\n" +
		"- item\n\n  ```bash\n  tollgate serve --help\n  ```\n"
	cmds := shellCommands(md)
	want := []docCommand{
		{3, "make demo   # the demo"},
		{5, "./tollgate check-config --workers examples/workers.yaml --router-policy-config 'examples/a b.yaml'"},
		{7, `echo '{"model":"m"}' | ./tollgate tokenize --model-tokenizer m=hf:/models/m`},
		{16, "tollgate serve --help"},
	}
	if fmt.Sprint(cmds) != fmt.Sprint(want) {
		t.Fatalf("commands\n%+v\nwant\n%+v", cmds, want)
	}
	if inv, err := parseInvocation(cmds[0].text); inv != nil || err != nil {
		t.Errorf("make demo: %v, %v", inv, err)
	}
	inv, err := parseInvocation(cmds[1].text)
	if err != nil || inv.command() != "check-config" || fmt.Sprint(inv.paths()) != "[examples/workers.yaml examples/a b.yaml]" {
		t.Errorf("check-config: %+v, %v", inv, err)
	}
	inv, err = parseInvocation(cmds[2].text)
	if err != nil || inv.command() != "tokenize" || inv.stdin != "{\"model\":\"m\"}\n" || fmt.Sprint(inv.paths()) != "[/models/m]" {
		t.Errorf("tokenize: %+v, %v", inv, err)
	}
	if inv, err = parseInvocation(cmds[3].text); err != nil || inv.command() != "help" {
		t.Errorf("serve --help: %+v, %v", inv, err)
	}
	if inv, err = parseInvocation("tollgate --workers examples/workers.yaml"); err != nil || inv.command() != "" {
		t.Errorf("bare flags: %+v, %v", inv, err)
	}
	if inv, err = parseInvocation("kubectl get lease > lease.txt"); inv != nil || err != nil {
		t.Errorf("another command that this test cannot run: %+v, %v", inv, err)
	}
	for _, bad := range []string{
		"./tollgate check-config --workers $WORKERS",
		"./tollgate check-config --workers \"$(pwd)/w.yaml\"",
		"./tollgate check-config > out.txt",
		"./tollgate check-config && echo ok",
		"./tollgate tokenize | jq .",
		"curl -s localhost | ./tollgate tokenize",
		"make demo; ./tollgate --help",
		"echo 'unterminated | ./tollgate tokenize",
	} {
		if _, err := parseInvocation(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}
