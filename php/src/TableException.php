<?php

declare(strict_types=1);

namespace Peregrine;

/**
 * TableException is what Peregrine\Table throws: an unknown table or column, a full table, a
 * string too long or a value of the wrong type. The native runtime registers its own class of
 * this name; this file serves the cli runtime's Peregrine\Table.
 */
final class TableException extends \RuntimeException
{
}
