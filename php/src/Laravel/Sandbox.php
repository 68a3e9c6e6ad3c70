<?php

declare(strict_types=1);

namespace Peregrine\Laravel;

use Illuminate\Container\Container;
use Illuminate\Contracts\Foundation\Application;
use Illuminate\Database\Connection;
use Illuminate\Support\Facades\Facade;
use Illuminate\Support\Str;

/**
 * Sandbox puts a booted Laravel application back, after each request, in the state it had when
 * the worker finished booting, so that the next request sees nothing of the last one.
 *
 * Where Octane clones the application for each request and then hands the clone to every
 * service that holds the container, the sandbox keeps one application and restores it in place:
 *
 *     boot --> capture(): the state of the container and of every service resolved at boot
 *                 |
 *                 v
 *     request --> response sent --> terminate() --> restore() --+
 *        ^                                                      |
 *        +------------------------------------------------------+
 *
 * restore() puts back the container's own state (instances resolved during the request,
 * bindings, terminating callbacks and anything else registered on it at run time are dropped)
 * and every property of every service that existed at boot: the config repository (config
 * changed at run time), the auth manager (its guards and their user), the session manager (its
 * store), the cookie jar (its queue), the URL generator (its request, forced root and scheme,
 * defaults), the router (current route and request), the translator (locale), the view factory
 * (shared data, sections, stacks), the validation factory (extensions), the event dispatcher
 * (listeners added at run time, with the Eloquent models' boot state that goes with them), the
 * gate (abilities and policies defined at run time), the HTTP kernel and the exception
 * handler. Then it resets what lives one level deeper or in static properties: database
 * transactions left open, query logs and the connections' beforeExecuting() callbacks, log
 * context, array caches, the facades' resolved instances, the static state listed in STATICS
 * (Eloquent's, Str's UUID factory, JsonResource's wrapper, the paginators' resolvers...),
 * Carbon's test clock and locale, Str's caches, the controller the matched route kept.
 *
 * What is deliberately kept: the database and Redis connections and the loggers (reconnecting
 * for every request is what a worker avoids), the encrypter, the hasher and the filesystem.
 *
 * @internal
 */
final class Sandbox
{
    /** Services kept as they are: connections and stateless helpers. */
    private const KEEP = ['db', 'db.factory', 'db.connection', 'log', 'redis', 'redis.connection', 'encrypter', 'hash', 'hash.driver', 'files'];

    /** Services that belong to one request, forgotten even when the boot resolved them. */
    private const FORGET = ['session.store', 'auth.driver', 'redirect', 'Illuminate\Contracts\Routing\ResponseFactory'];

    /**
     * Static properties that a request can set (through Laravel's own API) and that PHP-FPM would
     * give the next request fresh: each is put back to its value after boot. A class loaded only
     * after boot is put back to its declared defaults, which are its values after boot (the boot
     * would have loaded it to set one). Properties a version lacks are skipped.
     */
    private const STATICS = [
        // Models booted in a request, with the listeners and scopes they registered; unguard(),
        // preventLazyLoading(); withoutEvents() and withoutBroadcasting() left by an exit().
        'Illuminate\Database\Eloquent\Model' => ['booted', 'traitInitializers', 'globalScopes', 'ignoreOnTouch', 'unguarded',
            'modelsShouldPreventLazyLoading', 'lazyLoadingViolationCallback', 'dispatcher', 'isBroadcasting'],
        // noConstraints() left by an exit() (every relation would load every row), morphMap().
        'Illuminate\Database\Eloquent\Relations\Relation' => ['constraints', 'morphMap', 'requireMorphMap', 'selfJoinCount'],
        // createUuidsUsing(), a test helper like Carbon's setTestNow(): frozen UUIDs for all.
        'Illuminate\Support\Str' => ['uuidFactory'],
        // JsonResource::withoutWrapping() / wrap().
        'Illuminate\Http\Resources\Json\JsonResource' => ['wrap'],
        // Paginator::currentPageResolver() and the like, useBootstrap().
        'Illuminate\Pagination\AbstractPaginator' => ['currentPathResolver', 'currentPageResolver', 'queryStringResolver',
            'viewFactoryResolver', 'defaultView', 'defaultSimpleView'],
        'Illuminate\Pagination\AbstractCursorPaginator' => ['currentCursorResolver'],
        // skipWhen(): a callback per request would pile up.
        'Illuminate\Foundation\Http\Middleware\TrimStrings' => ['skipCallbacks'],
        'Illuminate\Foundation\Http\Middleware\ConvertEmptyStringsToNull' => ['skipCallbacks'],
        // Date::use() and the like.
        'Illuminate\Support\DateFactory' => ['dateClass', 'callable', 'factory'],
        // Password::defaults().
        'Illuminate\Validation\Rules\Password' => ['defaultCallback'],
    ];

    /** @var array<class-string, array<string, mixed>> STATICS' values after boot, by class */
    private array $statics = [];

    /** @var \WeakMap<Connection, list<\Closure>> the connections' beforeExecuting() callbacks after boot */
    private \WeakMap $beforeExecuting;

    private ?string $carbonLocale = null;

    /**
     * @param list<ObjectState> $states the container's and its services' states after boot
     */
    private function __construct(
        private readonly Application $app,
        private readonly array $states,
    ) {
    }

    /**
     * Takes the state of the booted $app; $keep names further services to leave as they are
     * (the app's config key peregrine.keep adds to it).
     *
     * @param list<string> $keep
     */
    public static function capture(Application $app, array $keep = []): self
    {
        $kept = [];
        foreach ([...self::KEEP, ...$keep] as $id) {
            if ($app->resolved($id)) {
                $kept[spl_object_id($app->make($id))] = true;
            }
        }
        $states = [ObjectState::of($app)];
        $seen = [spl_object_id($app) => true] + $kept;
        $instances = \Closure::bind(static fn (Container $c): array => $c->instances, null, Container::class)($app);
        foreach ($instances as $instance) {
            if (!\is_object($instance) || isset($seen[spl_object_id($instance)]) || $instance instanceof \Closure) {
                continue;
            }
            $seen[spl_object_id($instance)] = true;
            $states[] = ObjectState::of($instance);
        }
        $sandbox = new self($app, $states);
        foreach (array_keys(self::STATICS) as $class) {
            if (class_exists($class, false)) {
                $sandbox->statics[$class] = self::staticsOf($class, false);
            }
        }
        $sandbox->beforeExecuting = new \WeakMap();
        if ($app->resolved('db') && property_exists(Connection::class, 'beforeExecutingCallbacks')) {
            foreach ($app['db']->getConnections() as $connection) {
                $sandbox->beforeExecuting[$connection] = self::beforeExecutingOf($connection);
            }
        }
        if (class_exists(\Carbon\Carbon::class, false)) {
            $sandbox->carbonLocale = \Carbon\Carbon::getLocale();
        }

        return $sandbox;
    }

    /**
     * Names what the last request changed in the application and its services, as
     * "service: property" (the leak report of workers.debug_leaks).
     *
     * @return list<string>
     */
    public function changes(): array
    {
        $changes = [];
        foreach ($this->states as $state) {
            foreach ($state->changed() as $property) {
                $changes[] = $state->object::class . '::$' . $property;
            }
        }

        return $changes;
    }

    /** Puts the application back as it was after boot. */
    public function restore(): void
    {
        $app = $this->app;
        $route = $app->resolved('request') ? $app['request']->route() : null;
        if (\is_object($route) && method_exists($route, 'flushController')) {
            $route->flushController();
        }
        $this->settleDatabase();
        $this->settleLogs();
        foreach ($this->states as $state) {
            $state->restore();
        }
        foreach (self::FORGET as $id) {
            $app->forgetInstance($id);
        }
        if ($app->resolved('session')) {
            $app['session']->forgetDrivers();
        }
        if ($app->resolved('auth')) {
            $app['auth']->forgetGuards();
        }
        if ($app->resolved('cookie')) {
            $app['cookie']->flushQueuedCookies();
        }
        $this->flushArrayCaches();
        $this->restoreStatics();
        if (class_exists(\Carbon\Carbon::class, false)) {
            if (\Carbon\Carbon::hasTestNow()) {
                \Carbon\Carbon::setTestNow();
            }
            if ($this->carbonLocale !== null && \Carbon\Carbon::getLocale() !== $this->carbonLocale) {
                \Carbon\Carbon::setLocale($this->carbonLocale);
            }
        }
        if (method_exists(Str::class, 'flushCache')) {
            Str::flushCache();
        }
        Container::setInstance($app);
        Facade::setFacadeApplication($app);
        Facade::clearResolvedInstances();
    }

    /**
     * Rolls back transactions a request left open (FPM's closed connection would), empties
     * query logs and turns off the ones a request turned on, forgets sticky write state.
     */
    private function settleDatabase(): void
    {
        if (!$this->app->resolved('db')) {
            return;
        }
        foreach ($this->app['db']->getConnections() as $connection) {
            try {
                while ($connection->transactionLevel() > 0) {
                    $connection->rollBack();
                }
            } catch (\Throwable $e) {
                error_log('peregrine: rolling back a transaction left open: ' . $e->getMessage());
                $this->app['db']->purge($connection->getName());
                continue;
            }
            $connection->flushQueryLog();
            $connection->disableQueryLog();
            if (method_exists($connection, 'forgetRecordModificationState')) {
                $connection->forgetRecordModificationState();
            }
            // A connection opened after boot had none: the boot would have opened it to add one.
            $callbacks = $this->beforeExecuting[$connection] ?? [];
            if ($connection instanceof Connection && property_exists($connection, 'beforeExecutingCallbacks')
                && self::beforeExecutingOf($connection) !== $callbacks) {
                \Closure::bind(static function (Connection $c) use ($callbacks): void {
                    $c->beforeExecutingCallbacks = $callbacks;
                }, null, Connection::class)($connection);
            }
        }
    }

    /** Drops the context a request added to the log channels and resets Monolog's handlers. */
    private function settleLogs(): void
    {
        if (!$this->app->resolved('log')) {
            return;
        }
        $log = $this->app['log'];
        $channels = method_exists($log, 'getChannels') ? $log->getChannels() : [];
        foreach ($channels as $channel) {
            if (method_exists($channel, 'withoutContext')) {
                $channel->withoutContext();
            }
            $logger = method_exists($channel, 'getLogger') ? $channel->getLogger() : null;
            if ($logger instanceof \Monolog\ResettableInterface) {
                $logger->reset();
            }
        }
    }

    /** Empties the array cache stores, which under PHP-FPM live for one request. */
    private function flushArrayCaches(): void
    {
        if (!$this->app->resolved('cache')) {
            return;
        }
        $stores = \Closure::bind(static fn (object $m): array => $m->stores ?? [], null, $this->app['cache']::class)($this->app['cache']);
        foreach ($stores as $store) {
            if (method_exists($store, 'getStore') && $store->getStore() instanceof \Illuminate\Cache\ArrayStore) {
                $store->getStore()->flush();
            }
        }
    }

    /** Puts STATICS back to their values after boot, for the classes loaded now. */
    private function restoreStatics(): void
    {
        foreach (array_keys(self::STATICS) as $class) {
            if (!class_exists($class, false)) {
                continue;
            }
            $boot = $this->statics[$class] ??= self::staticsOf($class, true);
            if (self::staticsOf($class, false) === $boot) {
                continue;
            }
            foreach ($boot as $name => $value) {
                (new \ReflectionProperty($class, $name))->setValue(null, $value);
            }
        }
    }

    /**
     * @param class-string $class one of STATICS
     *
     * @return array<string, mixed> its STATICS properties: their values, or their declared defaults
     */
    private static function staticsOf(string $class, bool $defaults): array
    {
        $values = [];
        foreach (self::STATICS[$class] as $name) {
            if (property_exists($class, $name)) {
                $property = new \ReflectionProperty($class, $name);
                $values[$name] = $defaults ? $property->getDefaultValue() : $property->getValue();
            }
        }

        return $values;
    }

    /** @return list<\Closure> */
    private static function beforeExecutingOf(Connection $connection): array
    {
        return \Closure::bind(static fn (Connection $c): array => $c->beforeExecutingCallbacks, null, Connection::class)($connection);
    }
}
