package kube

import (
	"strings"
	"testing"
	"testing/synctest"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/tollgate/tollgate/extproc/fleet"
	"github.com/tollgate/tollgate/sched"
	"github.com/tollgate/tollgate/test/kubefixture"
)

// rolePod returns pod name labeled with llm-d's role (none when role is
// "-") and annotated with kv.
func rolePod(name, ip, role string, kv ...string) *corev1.Pod {
	p := kubefixture.Pod(name, ip, kv...)
	if role != "-" {
		p.Labels[LabelRole] = role
	}
	return p
}

func TestPodWorker_RoleFromLabelAndAnnotation(t *testing.T) {
	tests := []struct {
		name, label string
		ann         []string
		want        string
	}{
		{"no label is both", "-", nil, ""},
		{"prefill", "prefill", nil, "prefill"},
		{"decode", "decode", nil, "decode"},
		{"prefill-decode is both", "prefill-decode", nil, "both"},
		{"llm-d's deprecated both", "both", nil, "both"},
		{"encode-prefill is prefill", "encode-prefill", nil, "prefill"},
		{"encode-prefill-decode is both", "encode-prefill-decode", nil, "both"},
		{"an unknown value is both", "sidecar", nil, ""},
		{"the annotation alone", "-", []string{AnnotationRole, "prefill"}, "prefill"},
		{"the annotation overrides the label", "prefill", []string{AnnotationRole, "decode"}, "decode"},
		{"an empty annotation is both", "encode", []string{AnnotationRole, ""}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, err := podWorker(rolePod("p0", "10.0.0.1", tt.label, tt.ann...), Defaults{})
			if err != nil {
				t.Fatal(err)
			}
			if w.Role != tt.want {
				t.Errorf("role %q, want %q", w.Role, tt.want)
			}
			if _, err := fleet.ParseRole(w.Role); err != nil {
				t.Errorf("fleet refuses the role: %v", err)
			}
		})
	}
}

func TestPodWorker_RoleProblemsExcludeThePod(t *testing.T) {
	tests := []struct {
		name, label string
		ann         []string
		want        []string // substrings of the error
	}{
		{"encode-only pod", "encode", nil, []string{`label llm-d.ai/role="encode"`, "neither prefill nor decode"}},
		{"llm-d's spelling in the annotation", "-", []string{AnnotationRole, "prefill-decode"},
			[]string{`annotation tollgate.io/role="prefill-decode"`, "not one of both, prefill, decode"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := podWorker(rolePod("p0", "10.0.0.1", tt.label, tt.ann...), Defaults{})
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

// TestNoteIgnored_UnknownRoleLabel: an unknown role value is noted (the
// worker is both); a known one, or one the annotation overrides, is not.
func TestNoteIgnored_UnknownRoleLabel(t *testing.T) {
	notes := map[string]string{}
	noteIgnored(rolePod("p0", "10.0.0.1", "Prefill"), notes)
	want := `label llm-d.ai/role="Prefill" is not a role tollgate knows (known: both, decode, encode, encode-prefill, encode-prefill-decode, prefill, prefill-decode): the worker is both; annotate tollgate.io/role to set its role`
	if got := notes["pod llm/p0 labels"]; got != want || len(notes) != 1 {
		t.Errorf("notes %q, want one: %s", notes, want)
	}
	for _, p := range []*corev1.Pod{
		rolePod("p1", "10.0.0.1", "-"),
		rolePod("p1", "10.0.0.1", "prefill-decode"),
		rolePod("p1", "10.0.0.1", "encode"), // left out by podWorker, noted there
		rolePod("p1", "10.0.0.1", "Prefill", AnnotationRole, "prefill"),
	} {
		notes := map[string]string{}
		if noteIgnored(p, notes); len(notes) != 0 {
			t.Errorf("labels %v annotations %v noted %q", p.Labels, p.Annotations, notes)
		}
	}
}

// TestSliceBuilder_Roles: the EndpointSlice source carries the roles; an
// unknown value keeps its worker as both and is noted, an encode-only pod
// is left out and noted.
func TestSliceBuilder_Roles(t *testing.T) {
	snap := buildSlices(t, "http", Defaults{},
		rolePod("a", "10.0.0.1", "prefill"), rolePod("b", "10.0.0.2", "decode"), rolePod("c", "10.0.0.3", "sidecar"), rolePod("d", "10.0.0.4", "encode"),
		kubefixture.Slice("vllm-1", "vllm", 8000, kubefixture.Endpoint{Pod: "a", IP: "10.0.0.1"}, kubefixture.Endpoint{Pod: "b", IP: "10.0.0.2"},
			kubefixture.Endpoint{Pod: "c", IP: "10.0.0.3"}, kubefixture.Endpoint{Pod: "d", IP: "10.0.0.4"}))
	if got, want := kubefixture.Summary(snap.workers), "llm/a@10.0.0.1:8000 llm/b@10.0.0.2:8000 llm/c@10.0.0.3:8000"; got != want {
		t.Fatalf("workers %q, want %q", got, want)
	}
	set, err := fleet.NewSet(snap.workers)
	if err != nil {
		t.Fatal(err)
	}
	want := []sched.Role{sched.RolePrefill, sched.RoleDecode, sched.RoleBoth}
	for i, w := range set.Sched {
		if w.Role != want[i] {
			t.Errorf("worker %s: role %v, want %v", w.ID, w.Role, want[i])
		}
	}
	if !strings.Contains(snap.notes["pod llm/c labels"], `"sidecar" is not a role`) ||
		!strings.Contains(snap.notes["pod llm/d"], "encode-only") || len(snap.notes) != 2 {
		t.Errorf("notes %q", snap.notes)
	}
}

// TestPoolSource_Roles: the InferencePool source carries the role to
// every port's worker.
func TestPoolSource_Roles(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := startPoolSource(t, []runtime.Object{kubefixture.InferencePool("pool", 8000, 8001)},
			rolePod("p", "10.0.0.1", "prefill"), rolePod("d", "10.0.0.2", "-", AnnotationRole, "decode"))
		ws := e.rec.Await(t, "llm/d:8000@10.0.0.2:8000 llm/d:8001@10.0.0.2:8001 llm/p:8000@10.0.0.1:8000 llm/p:8001@10.0.0.1:8001")
		for i, want := range []string{"decode", "decode", "prefill", "prefill"} {
			if ws[i].Role != want {
				t.Errorf("worker %s: role %q, want %q", ws[i].ID, ws[i].Role, want)
			}
		}
	})
}
