package main

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// TestJobsVerb: every jobs command's arguments, and a usage error that names what is missing
// or extra (it used to print nothing and exit 1).
func TestJobsVerb(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		verb    string
		rest    []string
		wantErr string
	}{
		{args: nil, verb: "list"},
		{args: []string{"push", "q", "{}"}, verb: "push", rest: []string{"q", "{}"}},
		{args: []string{"push", "q"}, wantErr: "jobs push: missing PAYLOAD"},
		{args: []string{"push"}, wantErr: "jobs push: missing PIPELINE PAYLOAD"},
		{args: []string{"retry"}, wantErr: "jobs retry: missing PIPELINE"},
		{args: []string{"pause"}, wantErr: "jobs pause: missing PIPELINE"},
		{args: []string{"resume", "q"}, verb: "resume", rest: []string{"q"}},
		{args: []string{"retry", "q", "a", "b"}, verb: "retry", rest: []string{"q", "a", "b"}},
		{args: []string{"delete", "q"}, wantErr: "jobs delete: missing ID..."},
		{args: []string{"delete"}, wantErr: "jobs delete: missing PIPELINE ID..."},
		{args: []string{"delete", "q", "a", "b"}, verb: "delete", rest: []string{"q", "a", "b"}},
		{args: []string{"dead"}, wantErr: "jobs dead: missing PIPELINE"},
		{args: []string{"dead", "q"}, verb: "dead", rest: []string{"q"}},
		{args: []string{"dead", "q", "show"}, wantErr: "jobs dead show: missing ID"},
		{args: []string{"dead", "q", "show", "abc"}, verb: "dead show", rest: []string{"q", "abc"}},
		{args: []string{"dead", "q", "show", "abc", "x"}, wantErr: `jobs dead show: unexpected "x" after PIPELINE ID`},
		{args: []string{"dead", "q", "retry", "abc"}, wantErr: `jobs dead q: unexpected "retry"`},
		{args: []string{"list", "x"}, wantErr: `jobs list: unexpected "x"`},
		{args: []string{"frobnicate"}, wantErr: `jobs: unknown command "frobnicate"`},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			verb, rest, err := jobsVerb(tc.args)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || verb != tc.verb || !slices.Equal(rest, tc.rest) && len(rest)+len(tc.rest) > 0 {
				t.Fatalf("jobsVerb(%q) = %q, %q, %v; want %q, %q", tc.args, verb, rest, err, tc.verb, tc.rest)
			}
		})
	}
}

// TestJobsUsageErrorIsPrinted: the error reaches the user (main prints errors that do not wrap
// errUsage) with the usage after it.
func TestJobsUsageErrorIsPrinted(t *testing.T) {
	var out, errOut strings.Builder
	err := run([]string{"jobs", "retry"}, &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), "missing PIPELINE") || !strings.Contains(err.Error(), "usage:") {
		t.Fatalf("err = %v", err)
	}
	if errors.Is(err, errUsage) {
		t.Fatal("the error wraps errUsage: main would print nothing")
	}
}
