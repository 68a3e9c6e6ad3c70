<?php

use App\Probe\Cart;
use Illuminate\Cache\ArrayStore;
use Illuminate\Cache\Repository as CacheRepository;
use Illuminate\Config\Repository as ConfigRepository;
use Illuminate\Database\Eloquent\Model;
use Illuminate\Http\Request;
use Illuminate\Support\Facades\App;
use Illuminate\Support\Facades\Auth;
use Illuminate\Support\Facades\Cache;
use Illuminate\Support\Facades\Config;
use Illuminate\Support\Facades\Cookie;
use Illuminate\Support\Facades\DB;
use Illuminate\Support\Facades\Event;
use Illuminate\Support\Facades\Gate;
use Illuminate\Support\Facades\Route;
use Illuminate\Support\Facades\URL;
use Illuminate\Support\Facades\Validator;
use Illuminate\Support\Facades\View;

// Each "set" route changes one piece of state as a request may; the matching "get" route
// shows what the next request sees. Under PHP-FPM every "get" shows the boot value.

Route::get('/config/set', function (Request $r) {
    config(['app.name' => $r->query('v')]);

    return config('app.name');
});
Route::get('/config/get', fn () => config('app.name'));

Route::get('/config/swap', function () {
    $swapped = new ConfigRepository(config()->all());
    $swapped->set('app.name', 'swapped');
    Config::swap($swapped);

    return Config::get('app.name');
});

Route::get('/auth/set', function (Request $r) {
    Auth::setUser(\App\Models\User::findOrFail((int) $r->query('id')));

    return Auth::user()->email;
});
Route::get('/auth/get', fn () => Auth::user()?->email ?? 'nobody');

Route::get('/session/set', function (Request $r) {
    $r->session()->put('secret', $r->query('v'));
    $r->session()->flash('status', 'flash for ' . $r->query('v'));

    return 'ok';
});
Route::get('/session/get', fn (Request $r) => ($r->session()->get('secret') ?? 'none') . '|' . ($r->session()->get('status') ?? 'none'));

Route::get('/cookie/queue', function (Request $r) {
    Cookie::queue('probe', $r->query('v'), 10);

    return 'queued';
});
Route::get('/cookie/none', fn () => 'no cookie queued here');

Route::get('/url/set', function (Request $r) {
    URL::forceRootUrl('http://' . $r->query('v') . '.example');
    URL::forceScheme('https');
    URL::defaults(['team' => $r->query('v')]);

    return url('/x');
});
Route::get('/url/get', fn () => url('/x') . ' ' . url()->current() . ' ' . json_encode(URL::getDefaultParameters()));

Route::get('/validator/set', function () {
    Validator::extend('probe', fn () => false);

    return Validator::make(['a' => 1], ['a' => 'probe'])->passes() ? 'passes' : 'fails';
});
Route::get('/validator/get', function () {
    try {
        return Validator::make(['a' => 1], ['a' => 'probe'])->passes() ? 'passes' : 'fails';
    } catch (\BadMethodCallException) {
        return 'no such rule';
    }
});

Route::get('/locale/set', function (Request $r) {
    App::setLocale($r->query('v'));

    return App::getLocale() . ' ' . app('translator')->getLocale();
});
Route::get('/locale/get', fn () => App::getLocale() . ' ' . app('translator')->getLocale() . ' ' . config('app.locale'));

Route::get('/view/set', function (Request $r) {
    View::share('probe', $r->query('v'));

    return 'shared';
});
Route::get('/view/get', fn () => View::shared('probe', 'none'));

Route::get('/container/set', function (Request $r) {
    app()->instance('probe.value', $r->query('v'));
    app()->bind('probe.bound', fn () => 'bound');
    app(Cart::class)->items[] = $r->query('v');

    return implode(',', app(Cart::class)->items);
});
Route::get('/container/get', fn () => (app()->bound('probe.value') ? app('probe.value') : 'unbound')
    . ' ' . (app()->bound('probe.bound') ? 'bound' : 'unbound') . ' [' . implode(',', app(Cart::class)->items) . ']');

Route::get('/event/set', function () {
    Event::listen('probe.event', fn () => 'leaked listener');

    return json_encode(Event::dispatch('probe.event'));
});
Route::get('/event/get', fn () => json_encode(Event::dispatch('probe.event')));

Route::get('/gate/set', function () {
    Gate::define('probe', fn () => true);

    return Gate::has('probe') ? 'defined' : 'undefined';
});
Route::get('/gate/get', fn () => Gate::has('probe') ? 'defined' : 'undefined');

Route::get('/model/set', function () {
    Model::unguard();

    return Model::isUnguarded() ? 'unguarded' : 'guarded';
});
Route::get('/model/get', fn () => Model::isUnguarded() ? 'unguarded' : 'guarded');

Route::get('/cache/set', function (Request $r) {
    Cache::store('array')->put('probe', $r->query('v'));
    Cache::swap(new CacheRepository(new ArrayStore()));

    return 'cached';
});
Route::get('/cache/get', fn () => Cache::store('array')->get('probe', 'none') . ' ' . (Cache::getStore() instanceof ArrayStore ? 'swapped' : 'file'));

Route::get('/db/set', function (Request $r) {
    DB::beginTransaction();
    DB::table('notes')->insert(['text' => 'uncommitted ' . $r->query('v')]);
    DB::enableQueryLog();

    return (string) DB::transactionLevel();
});
Route::get('/db/get', fn () => DB::transactionLevel() . ' ' . DB::table('notes')->where('text', 'like', 'uncommitted%')->count()
    . ' ' . (DB::logging() ? 'logging' : 'not logging'));

Route::get('/exit/set', function (Request $r) {
    config(['app.name' => 'exited ' . $r->query('v')]);
    app()->instance('probe.value', 'exited');
    echo 'bye';
    exit();
});

Route::get('/throw/set', function (Request $r) {
    config(['app.name' => 'thrown ' . $r->query('v')]);
    Auth::setUser(\App\Models\User::findOrFail(1));

    throw new RuntimeException('probe');
});

// The answer leaves before terminate(): the terminating callback waits for the file the test
// writes once it has the answer.
Route::get('/after', function (Request $r) {
    $token = $r->query('token');
    app()->terminating(function () use ($token) {
        $dir = getenv('PROBE_DIR');
        $seen = 'timeout';
        for ($i = 0; $i < 2000; $i++) {
            if (is_file("{$dir}/go-{$token}")) {
                $seen = 'go';
                break;
            }
            usleep(10000);
        }
        file_put_contents("{$dir}/terminate-{$token}", "callback {$seen}\n", FILE_APPEND);
    });

    return 'answered before terminate';
})->middleware('probe.terminate');

Route::get('/stream', function () {
    return response()->stream(function () {
        foreach (['one', 'two', 'three'] as $chunk) {
            echo $chunk, "\n";
            flush();
        }
    }, 200, ['Content-Type' => 'text/plain']);
});

// A bleed the sandbox cannot see: a static cache of the app's own (the leak report names it).
Route::get('/static/set', function (Request $r) {
    \App\Probe\Registry::$seen[] = $r->query('v');

    return implode(',', \App\Probe\Registry::$seen);
});
