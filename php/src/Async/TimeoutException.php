<?php

declare(strict_types=1);

namespace Peregrine\Async;

/**
 * TimeoutException is a CancelledException whose cause is a deadline: an await() with a
 * timeout, or a request past its exec_timeout.
 */
final class TimeoutException extends CancelledException
{
}
