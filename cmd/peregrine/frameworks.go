package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/peregrinephp/peregrine/internal/config"
)

// applyFramework sets cfg up for serve --laravel DIR or --symfony DIR: the worker is the PHP
// library's entry script for that framework (php/bin/laravel-worker.php or
// php/bin/symfony-worker.php) given DIR, run in DIR on the native runtime, with DIR/public as
// the document root for static files.
func applyFramework(cfg *config.Config, laravel, symfony string) error {
	if laravel != "" && symfony != "" {
		return fmt.Errorf("serve: --laravel and --symfony exclude each other")
	}
	dir, script := laravel, "laravel-worker.php"
	if symfony != "" {
		dir, script = symfony, "symfony-worker.php"
	}
	if dir == "" {
		return nil
	}
	if cfg.Workers.Concurrency > 1 {
		// The frameworks keep the request in process-wide state (the container, the session).
		return fmt.Errorf("serve: workers.concurrency is %d, but --laravel and --symfony run one request at a time per worker: set workers.concurrency: 1", cfg.Workers.Concurrency)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	if st, err := os.Stat(abs); err != nil || !st.IsDir() {
		return fmt.Errorf("serve: %s is not a directory", dir)
	}
	lib, err := phpLibrary()
	if err != nil {
		return err
	}
	cfg.Workers.Command = []string{"php", filepath.Join(lib, "bin", script), abs}
	if laravel != "" && len(cfg.Jobs.Pipelines) > 0 && len(cfg.Jobs.Consumers.Command) == 0 {
		// Jobs dispatched to the peregrine queue connection run on consumers of the same app.
		cfg.Jobs.Consumers.Command = []string{"php", filepath.Join(lib, "bin", "laravel-consumer.php"), abs}
	}
	cfg.Workers.Dir = abs
	cfg.Workers.Runtime = "native"
	cfg.HTTP.Root = filepath.Join(abs, "public")
	return nil
}

// phpLibrary finds Peregrine's PHP library (the directory holding autoload.php and bin/):
// $PEREGRINE_PHP_LIB when set, else ../php beside the binary (bin/peregrine in a checkout),
// else ../share/peregrine/php beside it (an installed /usr/local/bin/peregrine).
func phpLibrary() (string, error) {
	if dir := os.Getenv("PEREGRINE_PHP_LIB"); dir != "" {
		if _, err := os.Stat(filepath.Join(dir, "autoload.php")); err != nil {
			return "", fmt.Errorf("PEREGRINE_PHP_LIB=%s: no autoload.php there", dir)
		}
		return filepath.Abs(dir)
	}
	exe, err := os.Executable()
	if err != nil {
		return "", err
	}
	if resolved, err := filepath.EvalSymlinks(exe); err == nil {
		exe = resolved
	}
	bin := filepath.Dir(exe)
	candidates := []string{filepath.Join(bin, "..", "php"), filepath.Join(bin, "..", "share", "peregrine", "php")}
	for _, dir := range candidates {
		if _, err := os.Stat(filepath.Join(dir, "autoload.php")); err == nil {
			return filepath.Abs(dir)
		}
	}
	return "", fmt.Errorf("the PHP library of Peregrine was not found in %s or %s; set PEREGRINE_PHP_LIB to its directory (the php/ of the source tree)",
		candidates[0], candidates[1])
}
