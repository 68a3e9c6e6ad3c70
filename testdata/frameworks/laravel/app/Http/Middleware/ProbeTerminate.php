<?php

declare(strict_types=1);

namespace App\Http\Middleware;

use Closure;

final class ProbeTerminate
{
    public function handle($request, Closure $next)
    {
        return $next($request);
    }

    public function terminate($request, $response): void
    {
        file_put_contents(getenv('PROBE_DIR') . '/terminate-' . $request->query('token'), "middleware\n", FILE_APPEND);
    }
}
