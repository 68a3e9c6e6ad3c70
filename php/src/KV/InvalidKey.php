<?php

declare(strict_types=1);

namespace Peregrine\KV;

use Psr\SimpleCache\InvalidArgumentException;

/** InvalidKey is PSR-16's error for a key, a key list or a ttl it cannot take. */
final class InvalidKey extends \InvalidArgumentException implements InvalidArgumentException
{
}
