<?php

declare(strict_types=1);

namespace Peregrine;

/**
 * Table is the cli runtime's stand-in for the native runtime's Peregrine\Table, a shared-memory
 * table every worker sees (docs/tables.md). The native runtime registers its own class before
 * any PHP runs, so an autoloader never reaches this file there; under the cli runtime, where PHP
 * has no way into the server's shared memory, open() says so.
 */
final class Table
{
    private function __construct()
    {
    }

    /**
     * @throws TableException always: shared tables need the native runtime.
     */
    public static function open(string $name): never
    {
        throw new TableException(sprintf(
            'table %s: shared tables need the native runtime (workers.runtime: native, the default); '
            . 'this worker runs under the cli runtime (docs/tables.md)',
            $name,
        ));
    }
}
