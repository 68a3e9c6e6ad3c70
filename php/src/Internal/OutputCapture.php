<?php

declare(strict_types=1);

namespace Peregrine\Internal;

/**
 * OutputCapture collects what a script written for PHP-FPM outputs, with PHP's own output
 * buffers, so that ob_clean(), ob_get_clean() and ob_end_clean() discard as they do under FPM.
 *
 * Under Debian's PHP-FPM a script starts inside one removable buffer (output_buffering=4096):
 * ob_end_clean() at the top level discards it, and what is echoed afterwards goes straight to
 * the client. A worker has no client behind STDOUT, so start() opens two plain buffers above
 * the current level N:
 *
 *     N+1  guard    catches the output after the script has removed the capture buffer
 *     N+2  capture  the script's level-1 buffer: ob_clean() and ob_end_clean() discard it
 *     N+3… the script's own buffers
 *
 * finish() flushes every removable buffer above N into the one below, in order, and takes what
 * reaches N+1 as the body. A buffer the script opened without PHP_OUTPUT_HANDLER_REMOVABLE
 * (ob_start(null, 0, 0)) cannot be closed by any PHP code until the process ends: its contents
 * are taken (and cleared when it is cleanable), what lies below it cannot be read, and stuck()
 * reports it, because the worker carries the buffer into every later request.
 *
 * @internal
 */
final class OutputCapture
{
    private int $base = -1;
    private bool $stuck = false;

    /** Opens the guard and capture buffers above the current level. */
    public function start(): void
    {
        $this->base = ob_get_level();
        ob_start();
        ob_start();
    }

    /**
     * Closes every buffer above the level start() found and returns the output they held, in
     * the order it was written.
     */
    public function finish(): string
    {
        $base = $this->base;
        $this->base = -1;
        while (ob_get_level() > $base + 1) {
            $top = ob_get_status();
            if (($top['flags'] ?? 0) & PHP_OUTPUT_HANDLER_REMOVABLE) {
                if (@ob_end_flush()) {
                    continue;
                }
            }

            return $this->abandon($top);
        }
        if (ob_get_level() === $base + 1) {
            $top = ob_get_status();
            if (($top['flags'] ?? 0) & PHP_OUTPUT_HANDLER_REMOVABLE) {
                return (string) ob_get_clean();
            }

            return $this->abandon($top);
        }

        // The script closed both buffers: what it wrote afterwards went to STDOUT, the log.
        return '';
    }

    /**
     * Whether a buffer that cannot be removed was left open: the worker keeps it for the rest of
     * its life, one more level for every such request, and should be replaced.
     */
    public function stuck(): bool
    {
        return $this->stuck;
    }

    /**
     * Takes the contents of a buffer that cannot be closed.
     *
     * @param array<string, mixed> $top ob_get_status() of the top buffer
     */
    private function abandon(array $top): string
    {
        $this->stuck = true;
        $body = (string) ob_get_contents();
        if (($top['flags'] ?? 0) & PHP_OUTPUT_HANDLER_CLEANABLE) {
            @ob_clean();
        }

        return $body;
    }
}
