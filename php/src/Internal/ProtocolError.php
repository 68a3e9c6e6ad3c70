<?php

declare(strict_types=1);

namespace Peregrine\Internal;

/**
 * ProtocolError means the conversation with the server is broken: a malformed frame, or a pipe
 * that fails. The worker reports it in an ERROR frame and exits; it never reaches a handler.
 *
 * @internal
 */
final class ProtocolError extends \RuntimeException
{
}
