<?php

declare(strict_types=1);

namespace App\Providers;

use App\Jobs\RecordJob;
use Illuminate\Support\Facades\Route;
use Illuminate\Support\ServiceProvider;

// GET /dispatch?mode=ok|throw|release[&delay=SECONDS] dispatches a RecordJob.
final class JobsTestProvider extends ServiceProvider
{
    public function boot(): void
    {
        Route::get('/dispatch', static function () {
            $pending = RecordJob::dispatch((string) request('mode', 'ok'));
            if (request('delay')) {
                $pending->delay((int) request('delay'));
            }

            return 'dispatched';
        });
    }
}
