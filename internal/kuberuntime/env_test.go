package kuberuntime

import "testing"

func TestExpand(t *testing.T) {
	vars := map[string]string{"A": "x", "EMPTY": ""}
	cases := map[string]string{
		"$(A)":          "x",
		"pre-$(A)-post": "pre-x-post",
		"$$(A)":         "$(A)",
		"$(B)":          "$(B)",
		"$(EMPTY)end":   "end",
		"$(A":           "$(A",
		"a$":            "a$",
		"$A":            "$A",
		"$$$(A)":        "$x",
		"no vars":       "no vars",
	}
	for in, want := range cases {
		if got := expand(in, vars); got != want {
			t.Errorf("expand(%q) = %q, want %q", in, got, want)
		}
	}
}
