/* async.h: the native runtime's hooks for concurrent workers (docs/concurrency.md).
 *
 * With PEREGRINE_CONCURRENCY > 1, at PHP's startup, sleep(), usleep() and time_nanosleep(), the
 * socket streams of the tcp and unix transports, and poll() (TLS, libpq, libcurl) are
 * hooked: inside a fiber that Peregrine\Async's loop runs, a wait suspends that fiber only. Everywhere else they do what
 * PHP's own do. The stacks of ended fibers are kept for the next (mmap(), munmap()), and each
 * request has header state of its own (peregrine_headers_*()). async.c installs itself (a constructor chaining zend_post_startup_cb), so no
 * other file calls it. */
#ifndef PEREGRINE_ASYNC_H
#define PEREGRINE_ASYNC_H

#include <stdbool.h>

/* Whether the hooks were installed at startup. */
bool pg_async_hooked(void);

#endif
