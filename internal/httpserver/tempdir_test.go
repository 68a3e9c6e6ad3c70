package httpserver

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
)

func TestUploadDirSweepsDeadDaemons(t *testing.T) {
	parent := t.TempDir()
	// A daemon that died: a process that has exited, so its pid is free.
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Skip(err)
	}
	dead := filepath.Join(parent, uploadDirPrefix+strconv.Itoa(cmd.Process.Pid))
	alive := filepath.Join(parent, uploadDirPrefix+strconv.Itoa(os.Getppid()))
	other := filepath.Join(parent, "peregrine-uploads-notapid")
	for _, d := range []string{dead, alive, other} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "peregrine-upload-1"), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}

	dir, swept, err := UploadDir(parent)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = RemoveUploadDir(dir) })
	if swept != 1 {
		t.Errorf("swept %d directories, want 1", swept)
	}
	if _, err := os.Stat(dead); !os.IsNotExist(err) {
		t.Errorf("the dead daemon's directory is still there: %v", err)
	}
	for _, d := range []string{alive, other} {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("%s was removed: %v", d, err)
		}
	}
	if want := filepath.Join(parent, uploadDirPrefix+strconv.Itoa(os.Getpid())); dir != want {
		t.Errorf("dir %s, want %s", dir, want)
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("upload dir: %v, mode %v", err, fi.Mode())
	}
	if err := RemoveUploadDir(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Error("RemoveUploadDir left the directory")
	}
	if err := RemoveUploadDir(parent); err == nil {
		t.Error("RemoveUploadDir removed a directory it did not make")
	}
}
