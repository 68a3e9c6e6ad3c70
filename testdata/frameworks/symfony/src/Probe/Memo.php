<?php

declare(strict_types=1);

namespace App\Probe;

use Symfony\Contracts\Service\ResetInterface;

// A service that keeps request data and declares how to forget it (autoconfigured: kernel.reset).
final class Memo implements ResetInterface
{
    public ?string $value = null;

    public function reset(): void
    {
        $this->value = null;
    }
}
