package config

import (
	"errors"
	"strings"
	"testing"
)

// TestAdminTokenRequiredOffLoopback: an admin listener reachable from other machines without a
// token would let anyone replace the workers (issue 9, finding 8).
func TestAdminTokenRequiredOffLoopback(t *testing.T) {
	tests := []struct {
		address, token string
		wantErr        bool
	}{
		{"127.0.0.1:9180", "", false},
		{"[::1]:9180", "", false},
		{"localhost:9180", "", false},
		{"127.0.0.2:9180", "", false},
		{"0.0.0.0:9180", "", true},
		{":9180", "", true},
		{"[::]:9180", "", true},
		{"192.0.2.10:9180", "", true},
		{"admin.example.com:9180", "", true},
		{"0.0.0.0:9180", "s3cret", false},
		{"", "", false},
	}
	for _, tt := range tests {
		c := Default()
		c.Workers.Command = []string{"php", "worker.php"}
		c.Admin.Address, c.Admin.Token = tt.address, tt.token
		err := c.Validate()
		var cerr *Error
		switch {
		case tt.wantErr && (!errors.As(err, &cerr) || cerr.Key != "admin.token"):
			t.Errorf("admin.address %q without a token: Validate() = %v, want an admin.token error", tt.address, err)
		case !tt.wantErr && err != nil:
			t.Errorf("admin.address %q, token %q: Validate() = %v", tt.address, tt.token, err)
		}
	}
}

func TestLimitsMustBePositive(t *testing.T) {
	for _, key := range []string{"max_header_count", "max_header_line", "max_cookies", "max_input_vars"} {
		_, err := Parse("peregrine.yaml", []byte("http:\n  "+key+": 0\n"))
		if err == nil || !strings.Contains(err.Error(), "http."+key+": must be positive") {
			t.Errorf("%s: 0: got %v", key, err)
		}
	}
	if _, err := Parse("peregrine.yaml", []byte("http:\n  max_connections: -1\n")); err == nil || !strings.Contains(err.Error(), "http.max_connections") {
		t.Errorf("max_connections: -1: got %v", err)
	}
	if _, err := Parse("peregrine.yaml", []byte("http:\n  server_name: \"a b\"\n")); err == nil || !strings.Contains(err.Error(), "http.server_name") {
		t.Errorf("server_name with a space: got %v", err)
	}
	if _, err := Parse("peregrine.yaml", []byte("admin:\n  token: \"a b\"\n")); err == nil || !strings.Contains(err.Error(), "admin.token") {
		t.Errorf("token with a space: got %v", err)
	}
}
