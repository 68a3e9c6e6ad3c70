<?php

declare(strict_types=1);

namespace Peregrine\Laravel;

/**
 * LeakReport is the development aid behind PEREGRINE_DEBUG_LEAKS=1. After each request it logs
 * one line (to the server's log, through error_log()) saying:
 *
 *   - what the request changed that the sandbox put back (the services' properties): harmless,
 *     but it shows which services hold request data;
 *   - what the request left in the worker that the sandbox does not reset: static properties of
 *     any class and global variables whose value changed during the request (a static cache of
 *     users, a registry filled per request): these are the bleeds and leaks to fix or to reset;
 *   - the worker's memory once the sandbox is done and garbage is collected, with a warning when
 *     it has grown after each of the last WINDOW requests.
 *
 * It reflects over every loaded class after each request: slow, for development only.
 *
 * @internal
 */
final class LeakReport
{
    /** Consecutive requests of growth that make a warning. */
    private const WINDOW = 20;

    private int $requests = 0;

    private int $growing = 0;

    private int $memory = 0;

    /** @var list<string> */
    private array $reset = [];

    /** @var array<string, mixed> "Class::$name" => value, after the last request */
    private array $statics;

    /** @var array<string, mixed> */
    private array $globals;

    public function __construct()
    {
        $this->statics = self::statics();
        $this->globals = self::globals();
    }

    /** Notes what the request changed in the services, before the sandbox restores them. */
    public function before(Sandbox $sandbox): void
    {
        $this->reset = $sandbox->changes();
    }

    /** Logs the report once the sandbox has restored the application. */
    public function after(): void
    {
        ++$this->requests;
        $statics = self::statics();
        $globals = self::globals();
        $left = [];
        foreach ($statics as $name => $value) {
            // A class loaded during the request is compared with its declared default.
            $before = \array_key_exists($name, $this->statics) ? $this->statics[$name] : self::declared($name);
            if ($before !== $value) {
                $left[] = $name;
            }
        }
        foreach ($globals as $name => $value) {
            if (!\array_key_exists($name, $this->globals) || $this->globals[$name] !== $value) {
                $left[] = '$GLOBALS[' . $name . ']';
            }
        }
        $this->statics = $statics;
        $this->globals = $globals;

        gc_collect_cycles();
        $memory = memory_get_usage();
        $delta = $this->memory === 0 ? 0 : $memory - $this->memory;
        $this->growing = $delta > 0 ? $this->growing + 1 : 0;
        $this->memory = $memory;
        error_log(sprintf('peregrine leaks: request %d left behind: %s; reset by the sandbox: %s; memory %d bytes (%+d)',
            $this->requests, $left === [] ? 'nothing' : implode(', ', $left),
            $this->reset === [] ? 'nothing' : implode(', ', $this->reset), $memory, $delta));
        if ($this->growing >= self::WINDOW) {
            error_log(sprintf('peregrine leaks: WARNING memory grew after each of the last %d requests (now %d bytes): something outside the sandbox keeps what requests give it',
                $this->growing, $memory));
            $this->growing = 0;
        }
    }

    /** @return array<string, mixed> the static properties of every loaded user class */
    private static function statics(): array
    {
        $values = [];
        foreach (get_declared_classes() as $class) {
            $reflection = new \ReflectionClass($class);
            if ($reflection->isInternal() || str_starts_with($class, 'Peregrine\\')) {
                continue;
            }
            foreach ($reflection->getProperties(\ReflectionProperty::IS_STATIC) as $property) {
                if ($property->class !== $class || !$property->isInitialized()) {
                    continue;
                }
                $property->setAccessible(true);
                $values[$class . '::$' . $property->name] = $property->getValue();
            }
        }

        return $values;
    }

    /** The default value "Class::$name" declares. */
    private static function declared(string $name): mixed
    {
        [$class, $property] = explode('::$', $name, 2);

        return (new \ReflectionProperty($class, $property))->getDefaultValue();
    }

    /** @return array<string, mixed> the globals, less the superglobals PHP sets per request */
    private static function globals(): array
    {
        $values = [];
        foreach ($GLOBALS as $name => $value) {
            if (!\in_array($name, ['GLOBALS', '_GET', '_POST', '_COOKIE', '_FILES', '_SERVER', '_REQUEST', '_ENV', '_SESSION', 'argv', 'argc'], true)) {
                $values[$name] = $value;
            }
        }

        return $values;
    }
}
