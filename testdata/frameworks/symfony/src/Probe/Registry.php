<?php

declare(strict_types=1);

namespace App\Probe;

// Static state no reset puts back: what workers.debug_leaks reports.
final class Registry
{
    /** @var list<string> */
    public static array $seen = [];
}
