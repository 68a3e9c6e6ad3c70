package integration

// The yardstick: real nginx + php-fpm8.2, started as child processes, answering the same
// journeys as Peregrine (wordpress_test.go in classic mode, frameworks_test.go in worker mode).

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// nginxFPMInstalled says which of nginx and php-fpm8.2 is missing, if one is.
func nginxFPMInstalled() error {
	for _, tool := range []string{"nginx", "php-fpm8.2"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%s is not installed (scripts/setup.sh installs it)", tool)
		}
	}
	return nil
}

// requireNginxFPM skips the test when nginx or php-fpm8.2 is missing.
func requireNginxFPM(t *testing.T) {
	t.Helper()
	if err := nginxFPMInstalled(); err != nil {
		t.Skipf("not compared with nginx + PHP-FPM: %v", err)
	}
}

// startNginxFPM runs php-fpm8.2 and nginx in the foreground for docroot, configured as Debian's
// default site suggests for PHP (snippets/fastcgi-php.conf, which also passes PATH_INFO for
// /index.php/some/path) with the try_files of WordPress's and Laravel's nginx guides
// (`$uri $uri/ /index.php?$query_string`; Symfony's guide's `$uri /index.php$is_args$args`
// sends the same requests to index.php), and returns the base URL. FPM's pool is its defaults
// (clear_env, php.ini-production) with 2 static children, and phpIni's name, value pairs as
// php_admin_value (what workers.php_ini sets in Peregrine). Both are stopped by pid at cleanup.
func startNginxFPM(t *testing.T, docroot string, phpIni ...string) string {
	t.Helper()
	dir := t.TempDir()
	// Below the ephemeral range: a port 0 taken and given back could be another test's
	// listener by the time nginx binds it.
	port, err := strconv.Atoi(freePorts(t, 1)[0])
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "fpm.sock")
	// As root (CI), both run as root, as the benchmark does; otherwise as the current user.
	root := os.Geteuid() == 0
	userFPM, userNginx, fpmArgs := "", "", []string{"php-fpm8.2", "-F", "-y", filepath.Join(dir, "php-fpm.conf")}
	if root {
		userFPM, userNginx, fpmArgs = "user = root\ngroup = root\n", "user root;\n", append(fpmArgs, "-R")
	}
	fpmConf := fmt.Sprintf("[global]\npid = %s/fpm.pid\nerror_log = %s/fpm.log\ndaemonize = no\n[www]\n%s"+
		"listen = %s\npm = static\npm.max_children = 2\n", dir, dir, userFPM, sock)
	for i := 0; i+1 < len(phpIni); i += 2 {
		fpmConf += fmt.Sprintf("php_admin_value[%s] = %s\n", phpIni[i], phpIni[i+1])
	}
	nginxConf := userNginx + fmt.Sprintf(`worker_processes 1;
pid %[1]s/nginx.pid;
error_log %[1]s/nginx-error.log warn;
events { worker_connections 256; }
http {
  include /etc/nginx/mime.types;
  default_type application/octet-stream;
  access_log off;
  sendfile on;
  client_body_temp_path %[1]s/t1; fastcgi_temp_path %[1]s/t2; proxy_temp_path %[1]s/t3;
  uwsgi_temp_path %[1]s/t4; scgi_temp_path %[1]s/t5;
  server {
    listen 127.0.0.1:%[2]d;
    root %[3]s;
    index index.php index.html;
    location ~ /\.(?!well-known/) { deny all; }
    location / { try_files $uri $uri/ /index.php?$query_string; }
    location ~ [^/]\.php(/|$) {
      include /etc/nginx/snippets/fastcgi-php.conf;
      fastcgi_pass unix:%[4]s;
    }
  }
}
`, dir, port, docroot, sock)
	for name, body := range map[string]string{"php-fpm.conf": fpmConf, "nginx.conf": nginxConf} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The snippet includes fastcgi.conf relative to the configuration's directory.
	if b, err := os.ReadFile("/etc/nginx/fastcgi.conf"); err == nil {
		_ = os.WriteFile(filepath.Join(dir, "fastcgi.conf"), b, 0o644)
	}
	run := func(stop syscall.Signal, args ...string) {
		cmd := exec.Command(args[0], args[1:]...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		log, _ := os.Create(filepath.Join(dir, filepath.Base(args[0])+".out"))
		cmd.Stdout, cmd.Stderr = log, log
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); log.Close(); close(done) }()
		t.Cleanup(func() {
			_ = cmd.Process.Signal(stop)
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
				<-done
			}
		})
	}
	run(syscall.SIGQUIT, fpmArgs...)
	eventually(t, 10*time.Second, "php-fpm's socket", func() bool { _, err := os.Stat(sock); return err == nil })
	run(syscall.SIGQUIT, "nginx", "-p", dir, "-e", filepath.Join(dir, "nginx-error.log"), "-c", filepath.Join(dir, "nginx.conf"), "-g", "daemon off;")
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	eventually(t, 10*time.Second, "nginx", func() bool {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	return base
}
