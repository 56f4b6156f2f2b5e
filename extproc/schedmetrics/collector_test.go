package schedmetrics

import "testing"

func TestTenantLabels_TopN(t *testing.T) {
	l := NewLabels(2)
	for _, tc := range []struct{ in, want string }{
		{"auth:a", "auth:a"}, {"auth:b", "auth:b"}, {"auth:c", "other"}, {"auth:a", "auth:a"}, {"ip:10.0.0.1", "other"},
	} {
		if got := l.Label(tc.in); got != tc.want {
			t.Errorf("Label(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
