<?php

declare(strict_types=1);

namespace App\Providers;

use Illuminate\Foundation\Support\Providers\RouteServiceProvider as ServiceProvider;
use Illuminate\Support\Facades\Route;

// The example's routes plus the probes of integration/frameworks_test.go.
final class RouteServiceProvider extends ServiceProvider
{
    public function register()
    {
        parent::register();
        $this->app->singleton(\App\Probe\Cart::class);
    }

    public function boot()
    {
        $this->app['router']->aliasMiddleware('probe.terminate', \App\Http\Middleware\ProbeTerminate::class);
        $this->routes(function () {
            Route::middleware('web')->group(base_path('routes/web.php'));
            Route::prefix('api')->middleware('api')->group(base_path('routes/api.php'));
            Route::prefix('probe')->middleware('web')->group(base_path('routes/probes.php'));
        });
    }
}
