<?php

declare(strict_types=1);

namespace App\Jobs;

use Illuminate\Bus\Queueable;
use Illuminate\Contracts\Queue\ShouldQueue;
use Illuminate\Foundation\Bus\Dispatchable;
use Illuminate\Queue\InteractsWithQueue;

// Appends "MODE ATTEMPT PID" to $JOB_LOG on each run, and "failed MODE" when Laravel gives up.
final class RecordJob implements ShouldQueue
{
    use Dispatchable, InteractsWithQueue, Queueable;

    public $tries = 3;

    public $backoff = 1;

    public function __construct(public string $mode)
    {
    }

    public function handle(): void
    {
        self::record("{$this->mode} {$this->attempts()} " . getmypid());
        if ($this->mode === 'throw') {
            throw new \RuntimeException('failing on purpose');
        }
        if ($this->mode === 'release' && $this->attempts() === 1) {
            $this->release(1);
        }
    }

    public function failed(\Throwable $e): void
    {
        self::record("failed {$this->mode} " . $e->getMessage());
    }

    private static function record(string $line): void
    {
        file_put_contents((string) getenv('JOB_LOG'), $line . "\n", FILE_APPEND | LOCK_EX);
    }
}
