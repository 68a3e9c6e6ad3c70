<?php

declare(strict_types=1);

namespace Peregrine\Async\Internal;

use Peregrine\Async\CancelledException;

/**
 * Task is what the loop knows of a fiber it runs (async()'s, or a request's): where it waits,
 * and a cancellation that came while it was running, delivered at its next wait.
 *
 * @internal
 */
final class Task
{
    public ?Suspension $waiting = null;
    public ?CancelledException $cancelled = null;

    /** @param string $label what the warnings name: the request's path */
    public function __construct(public readonly string $label)
    {
    }
}
