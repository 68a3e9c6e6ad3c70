package worker

import (
	"reflect"
	"testing"
)

func TestWithUploadDir(t *testing.T) {
	ini := []string{"-d", "memory_limit=64M", "-d", "upload_tmp_dir=/srv/uploads"}
	want := []string{"-d", "upload_tmp_dir=/run/up", "-d", "memory_limit=64M", "-d", "upload_tmp_dir=/srv/uploads"}
	if got := WithUploadDir(ini, "/run/up"); !reflect.DeepEqual(got, want) {
		t.Errorf("WithUploadDir: %q, want %q (the user's setting last, so it wins)", got, want)
	}
	if got := WithUploadDir(ini, ""); !reflect.DeepEqual(got, ini) {
		t.Errorf("WithUploadDir without a directory: %q, want %q", got, ini)
	}
	if got := WithUploadDir(nil, "/run/up"); !reflect.DeepEqual(got, []string{"-d", "upload_tmp_dir=/run/up"}) {
		t.Errorf("WithUploadDir(nil): %q", got)
	}
}
