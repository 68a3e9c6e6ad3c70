<?php

declare(strict_types=1);

namespace App\Probe;

// A singleton of the app's own, first resolved during a request.
final class Cart
{
    /** @var list<string> */
    public array $items = [];
}
