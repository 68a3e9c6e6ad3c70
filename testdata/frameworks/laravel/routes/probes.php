<?php

use App\Probe\Cart;
use Illuminate\Cache\ArrayStore;
use Illuminate\Cache\Repository as CacheRepository;
use Illuminate\Config\Repository as ConfigRepository;
use Illuminate\Database\Eloquent\Model;
use Illuminate\Database\Eloquent\Relations\Relation;
use Illuminate\Foundation\Http\Middleware\TrimStrings;
use Illuminate\Http\Resources\Json\JsonResource;
use Illuminate\Http\Request;
use Illuminate\Pagination\Paginator;
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
use Illuminate\Support\Str;

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

// Static state of Laravel's own that a request can set through its API.
Route::get('/uuid/set', function () {
    Str::createUuidsUsing(fn () => \Ramsey\Uuid\Uuid::fromString('00000000-0000-0000-0000-00000000000a'));

    return (string) Str::uuid();
});
Route::get('/uuid/get', fn () => (string) Str::uuid() === (string) Str::uuid() ? 'frozen' : 'random');

Route::get('/resource/set', function () {
    JsonResource::withoutWrapping();

    return JsonResource::make(['a' => 1])->response()->getContent();
});
Route::get('/resource/get', fn () => JsonResource::make(['a' => 1])->response()->getContent());

Route::get('/paginator/set', function (Request $r) {
    Paginator::currentPageResolver(fn () => (int) $r->query('v'));

    return (string) Paginator::resolveCurrentPage();
});
Route::get('/paginator/get', fn () => (string) Paginator::resolveCurrentPage());

Route::get('/trim/set', function () {
    TrimStrings::skipWhen(fn () => true);

    return 'skipping';
});
Route::get('/trim/get', fn (Request $r) => '[' . $r->query('s') . ']');

// A relation built inside noConstraints() when the request ends with exit(): without its
// constraints a user's relation would load every user's rows.
Route::get('/relation/exit', function () {
    Relation::noConstraints(function () {
        echo 'bye';
        exit();
    });
});
Route::get('/relation/get', fn () => str_contains((new \App\Models\User())->forceFill(['id' => 1])->hasMany(\App\Models\Note::class)->toBase()->toSql(), 'where')
    ? 'constrained' : 'unconstrained');

// A callback on the kept database connection.
Route::get('/db/callback/set', function () {
    DB::beforeExecuting(function () {
        throw new RuntimeException('a callback of an earlier request');
    });

    return 'registered';
});
Route::get('/db/callback/get', function () {
    try {
        return DB::select('select 1 as one')[0]->one === 1 ? 'ok' : 'unexpected';
    } catch (\Throwable $e) {
        return $e::class . ': ' . $e->getMessage();
    }
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
