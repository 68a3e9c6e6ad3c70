package main

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// The WordPress front page scenario serves Debian's `wordpress` package (6.1, with its default
// theme, twentytwentythree), unmodified, from a site the benchmark builds in its temporary
// directory: hard links to Debian's files (WordPress finds its wp-config.php beside the real
// path of wp-load.php, so symlinks would read Debian's /etc/wordpress config) and a wp-config.php
// naming a database of its own on the local MariaDB, dropped at the end. Both servers serve the
// same site and database; home and site URL follow the request's Host, so neither redirects to
// the other's port.

const wordpressSource = "/usr/share/wordpress"

// wordpressSite is a WordPress document root ready to serve, and how to remove its database.
type wordpressSite struct {
	dir, db string
	version string
}

// wordpressMissing says why the WordPress scenario cannot run here, or "" when it can.
func wordpressMissing() string {
	for _, f := range []string{wordpressSource + "/wp-settings.php", wordpressSource + "/wp-content/themes/twentytwentythree/theme.json"} {
		if _, err := os.Stat(f); err != nil {
			return "WordPress is not installed (apt-get install wordpress wordpress-theme-twentytwentythree mariadb-client; scripts/setup.sh installs them)"
		}
	}
	if _, err := exec.LookPath("mysql"); err != nil {
		return "the mysql client is missing (apt-get install mariadb-client)"
	}
	for _, a := range [][2]string{{"unix", "/run/mysqld/mysqld.sock"}, {"tcp", "127.0.0.1:3306"}} {
		if c, err := net.DialTimeout(a[0], a[1], 2*time.Second); err == nil {
			c.Close()
			return ""
		}
	}
	return "MariaDB is not running (start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd)"
}

func mysqlExec(sql string) error {
	out, err := exec.Command("mysql", "-uroot", "-e", sql).CombinedOutput()
	if err != nil {
		return fmt.Errorf("mysql -e %q: %v: %s", sql, err, out)
	}
	return nil
}

// prepareWordPress builds the site, creates its database and installs WordPress into it with
// the CLI (bench/apps/wordpress/install.php), which leaves the default content: the
// "Hello world!" post and pretty permalinks.
func (l *lab) prepareWordPress() (*wordpressSite, error) {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	site := &wordpressSite{dir: filepath.Join(l.tmp, "wordpress"), db: "peregrine_bench_wp_" + hex.EncodeToString(b),
		version: debVersion("wordpress")}
	if err := os.MkdirAll(site.dir, 0o755); err != nil {
		return nil, err
	}
	if out, err := exec.Command("cp", "-al", wordpressSource+"/.", site.dir+"/").CombinedOutput(); err != nil {
		logf("hard links failed (%v: %s); copying WordPress", err, strings.TrimSpace(string(out)))
		if out, err := exec.Command("cp", "-a", wordpressSource+"/.", site.dir+"/").CombinedOutput(); err != nil {
			return nil, fmt.Errorf("cp: %v: %s", err, out)
		}
	}
	_ = os.Remove(filepath.Join(site.dir, "wp-config.php")) // Debian's, which reads /etc/wordpress
	_ = os.Remove(filepath.Join(site.dir, ".htaccess"))
	var c strings.Builder
	c.WriteString("<?php\n// Written by bench/cmd/bench.\n")
	fmt.Fprintf(&c, "define('DB_NAME', '%s');\ndefine('DB_USER', 'root');\ndefine('DB_PASSWORD', '');\n", site.db)
	c.WriteString("define('DB_HOST', 'localhost');\ndefine('DB_CHARSET', 'utf8mb4');\ndefine('DB_COLLATE', '');\n")
	for _, k := range []string{"AUTH_KEY", "SECURE_AUTH_KEY", "LOGGED_IN_KEY", "NONCE_KEY", "AUTH_SALT", "SECURE_AUTH_SALT", "LOGGED_IN_SALT", "NONCE_SALT"} {
		k2 := make([]byte, 24)
		_, _ = rand.Read(k2)
		fmt.Fprintf(&c, "define('%s', '%s');\n", k, hex.EncodeToString(k2))
	}
	c.WriteString("$table_prefix = 'wp_';\n")
	// Both servers serve this site on their own ports: the URLs follow the request's Host.
	c.WriteString("$host = $_SERVER['HTTP_HOST'] ?? '127.0.0.1';\n")
	c.WriteString("define('WP_HOME', 'http://' . $host);\ndefine('WP_SITEURL', 'http://' . $host);\n")
	// No calls to wordpress.org and no cron requests to itself during the runs.
	c.WriteString("define('WP_HTTP_BLOCK_EXTERNAL', true);\ndefine('DISABLE_WP_CRON', true);\ndefine('AUTOMATIC_UPDATER_DISABLED', true);\n")
	c.WriteString("if (!defined('ABSPATH')) { define('ABSPATH', __DIR__ . '/'); }\nrequire_once ABSPATH . 'wp-settings.php';\n")
	if err := os.WriteFile(filepath.Join(site.dir, "wp-config.php"), []byte(c.String()), 0o644); err != nil {
		return nil, err
	}
	if err := mysqlExec("CREATE DATABASE `" + site.db + "` CHARACTER SET utf8mb4"); err != nil {
		return nil, err
	}
	out, err := l.php(nil, "bench/apps/wordpress/install.php", site.dir)
	if err != nil {
		site.drop()
		return nil, fmt.Errorf("installing WordPress: %w\n%s", err, out)
	}
	if !strings.Contains(out, "Hello world!") {
		site.drop()
		return nil, errors.New("installing WordPress: unexpected output:\n" + out)
	}
	return site, nil
}

// drop removes the site's database.
func (w *wordpressSite) drop() {
	if err := mysqlExec("DROP DATABASE IF EXISTS `" + w.db + "`"); err != nil {
		logf("%v", err)
	}
}
