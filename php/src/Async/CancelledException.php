<?php

declare(strict_types=1);

namespace Peregrine\Async;

/**
 * CancelledException is thrown into a fiber at the point where it waits (await(), delay(), a
 * hooked sleep() or socket) when what it waits for is cancelled: Future::cancel(), an await()
 * timeout, or the request's deadline. Its finally blocks run as the exception unwinds.
 */
class CancelledException extends \RuntimeException
{
}
