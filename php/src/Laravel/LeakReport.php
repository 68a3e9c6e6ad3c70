<?php

declare(strict_types=1);

namespace Peregrine\Laravel;

use Peregrine\Internal\LeakReport as Report;

/**
 * LeakReport is the Laravel worker's leak report (workers.debug_leaks, docs/frameworks.md):
 * Peregrine\Internal\LeakReport's line (static properties and globals the request left behind,
 * the worker's memory), with what the sandbox put back in the services:
 *
 *     peregrine leaks: request N left behind: ...; reset by the sandbox: ...; memory M bytes (+D)
 *
 * "reset by the sandbox" is harmless, but it shows which services hold request data.
 *
 * @internal
 */
final class LeakReport
{
    /** @var list<string> */
    private array $reset = [];

    private readonly Report $report;

    public function __construct()
    {
        $this->report = new Report();
    }

    /** Notes what the request changed in the services, before the sandbox restores them. */
    public function before(Sandbox $sandbox): void
    {
        $this->reset = $sandbox->changes();
    }

    /** Logs the report once the sandbox has restored the application. */
    public function after(): void
    {
        $this->report->after(['reset by the sandbox' => $this->reset]);
        $this->reset = [];
    }
}
