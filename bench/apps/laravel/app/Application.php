<?php

declare(strict_types=1);

namespace App;

/**
 * The framework's Application with the writable paths (bootstrap/cache, storage) moved to the
 * directory the benchmark names in LARAVEL_RUNTIME_DIR, so the app's source tree stays read-only.
 */
final class Application extends \Illuminate\Foundation\Application
{
    private string $runtime;

    public function __construct($basePath = null)
    {
        $dir = getenv('LARAVEL_RUNTIME_DIR');
        $this->runtime = \is_string($dir) && $dir !== '' ? $dir : sys_get_temp_dir() . '/peregrine-bench-laravel';
        foreach (['/bootstrap/cache', '/storage/framework/views', '/storage/framework/cache', '/storage/logs'] as $sub) {
            if (!is_dir($this->runtime . $sub)) {
                @mkdir($this->runtime . $sub, 0777, true);
            }
        }
        parent::__construct($basePath);
        $this->useStoragePath($this->runtime . '/storage');
    }

    public function bootstrapPath($path = '')
    {
        return $this->runtime . '/bootstrap' . ($path !== '' ? '/' . $path : '');
    }
}
