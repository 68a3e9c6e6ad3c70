<?php

declare(strict_types=1);

namespace Peregrine\Internal;

/**
 * LeakReport is the framework-neutral half of the leak report of workers.debug_leaks (the
 * workers see PEREGRINE_DEBUG_LEAKS=1). A framework's worker calls after() once it has put its
 * application back after a request; after() then logs one line:
 *
 *     peregrine leaks: request N left behind: NAMES[; LABEL: NAMES...]; memory M bytes (+D)
 *
 *   - left behind: the static properties of loaded classes and the global variables whose value
 *     changed since the last report (or, for a class loaded since, differs from its declared
 *     default), which no reset put back: the bleeds and leaks to fix or to reset;
 *   - LABEL: NAMES: what the caller adds, such as what its own reset put back;
 *   - memory: memory_get_usage() once garbage is collected, with the change since the last
 *     request; a second line, a WARNING, when it has grown after each of the last WINDOW
 *     requests.
 *
 * Classes of Peregrine's own and PHP's internal classes are left out, and so are the
 * superglobals PHP sets per request. It reflects over every loaded class at each call: slow, for
 * development only.
 *
 * @internal
 */
final class LeakReport
{
    /** Consecutive requests of growth that make a warning. */
    public const WINDOW = 20;

    /** The globals PHP itself sets for each request. */
    private const SUPERGLOBALS = ['GLOBALS', '_GET', '_POST', '_COOKIE', '_FILES', '_SERVER', '_REQUEST', '_ENV', '_SESSION', 'argv', 'argc'];

    private int $requests = 0;

    private int $growing = 0;

    private int $memory = 0;

    /** @var array<string, mixed> "Class::$name" => value, at the last snapshot */
    private array $statics;

    /** @var array<string, mixed> */
    private array $globals;

    /** @var \Closure(string): void */
    private readonly \Closure $log;

    /**
     * Takes the first snapshot: the next after() reports what changed since this call.
     *
     * @param (\Closure(string): void)|null $log where the lines go; error_log() when null
     */
    public function __construct(?\Closure $log = null)
    {
        $this->log = $log ?? static function (string $line): void {
            error_log($line);
        };
        $this->statics = self::statics();
        $this->globals = self::globals();
    }

    /**
     * Logs the report of the request that just ended. Each entry of $notes MUST map a label to
     * the names it lists; it is written as "; label: names" (or "nothing") before the memory.
     *
     * @param array<string, list<string>> $notes
     */
    public function after(array $notes = []): void
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

        $line = sprintf('peregrine leaks: request %d left behind: %s', $this->requests, self::names($left));
        foreach ($notes as $label => $names) {
            $line .= '; ' . $label . ': ' . self::names($names);
        }
        ($this->log)(sprintf('%s; memory %d bytes (%+d)', $line, $memory, $delta));
        if ($this->growing >= self::WINDOW) {
            ($this->log)(sprintf('peregrine leaks: WARNING memory grew after each of the last %d requests (now %d bytes): something outside the reset keeps what requests give it',
                $this->growing, $memory));
            $this->growing = 0;
        }
    }

    /** @param list<string> $names */
    private static function names(array $names): string
    {
        return $names === [] ? 'nothing' : implode(', ', $names);
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
            if (!\in_array($name, self::SUPERGLOBALS, true)) {
                $values[$name] = $value;
            }
        }

        return $values;
    }
}
