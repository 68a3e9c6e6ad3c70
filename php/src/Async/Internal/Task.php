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

    /** @var array{\Closure(): mixed, \Peregrine\Async\Future}|null the work and its Future, until a fiber takes them */
    public ?array $job = null;

    /**
     * @param string $label   what the warnings name: the request's path
     * @param int    $request the id of the request the fiber works for (its own, or the one that
     *                        called async()); 0 for none
     */
    public function __construct(public readonly string $label, public readonly int $request = 0)
    {
    }
}
