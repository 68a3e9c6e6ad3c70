package worker

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
)

var phpBinary = regexp.MustCompile(`^php(-cli)?[0-9.]*$`)

// IsPHP reports whether program looks like a PHP CLI binary (php, php8.2, /usr/bin/php-cli), the
// only kind of command that php_ini settings can be passed to.
func IsPHP(program string) bool {
	return phpBinary.MatchString(filepath.Base(program))
}

// PHPArgv returns argv with phpArgs (PHP's "-d", "name=value" options) inserted after the
// program when it runs PHP. Other commands are returned unchanged: they cannot take them.
func PHPArgv(argv []string, phpArgs []string) []string {
	if len(argv) == 0 || !IsPHP(argv[0]) {
		return argv
	}
	out := make([]string, 0, len(argv)+len(phpArgs))
	out = append(out, argv[0])
	out = append(out, phpArgs...)
	return append(out, argv[1:]...)
}

// WithUploadDir returns PHP's "-d" options ini with upload_tmp_dir set to dir ahead of them, so
// that the files PHP itself writes for multipart uploads (the native runtime parses bodies as
// PHP-FPM does) land in the daemon's own upload directory, which the next daemon removes if
// this one dies before it could. An upload_tmp_dir in ini (workers.php_ini) comes later and
// wins. An empty dir returns ini unchanged.
func WithUploadDir(ini []string, dir string) []string {
	if dir == "" {
		return ini
	}
	return append([]string{"-d", "upload_tmp_dir=" + dir}, ini...)
}

// LookPath finds the worker's program and, when it is missing, says what was looked for and
// how to get PHP.
func LookPath(program string) (string, error) {
	path, err := exec.LookPath(program)
	if err == nil {
		return path, nil
	}
	if IsPHP(program) {
		return "", fmt.Errorf("PHP not found: looked for %q in PATH (%w); install PHP 8.2 CLI with: apt-get install php8.2-cli php8.2-opcache", program, err)
	}
	return "", fmt.Errorf("worker command not found: looked for %q (%w); check workers.command", program, err)
}

// NativeProgram is the file name of Peregrine's native PHP runtime, built beside peregrine.
const NativeProgram = "peregrine-php"

// LookNative finds the native runtime: beside the running executable first (bin/peregrine and
// bin/peregrine-php, as make builds them), then in PATH.
func LookNative() (string, error) {
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), NativeProgram)
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	if p, err := exec.LookPath(NativeProgram); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("the native PHP runtime (%s) is not beside peregrine or in PATH: build it with `make build` "+
		"(it needs apt-get install libphp8.2-embed php8.2-dev), or set workers.runtime: cli", NativeProgram)
}
