/* async.c: the hooks that make blocking PHP calls suspend a request's fiber instead of the
 * worker (docs/concurrency.md). PHP's own code does the work; the hooks only wait first:
 *
 *   sleep(), usleep(), time_nanosleep()   their zend_function handlers are replaced; inside a
 *                                         loop fiber the wait is Peregrine\Async's timer
 *   tcp:// and unix:// socket streams      the transports' factories are wrapped, and each stream
 *   (mysqlnd, phpredis, http://, fsockopen, they make gets a copy of its ops whose read, write,
 *   stream_socket_client)                  connect and accept wait for the fd in the loop when it
 *                                         is not ready, then call the original op, which finds it
 *                                         ready; connect is made asynchronous and then awaited
 *
 * The waiting is Peregrine\Async\Internal\Hooks::wait() in PHP: it returns -1 (not hooked)
 * outside a fiber the loop runs or before a concurrent server enabled it, and the call then
 * blocks as PHP's own would. The fd is handed to PHP as a socket stream on a dup() of it, so
 * the loop's stream_select() sees it even when the extension unregistered its stream's resource
 * (mysqlnd does). A stream that turns on TLS (stream_socket_enable_crypto) gets its original ops
 * back: OpenSSL may hold decrypted bytes the fd does not show. TLS waits instead in poll(),
 * which this program defines ahead of libc's (below), as libpq (pgsql, PDO pgsql) and libcurl
 * do.
 *
 * It also keeps the stacks of ended fibers for the next ones (mmap()/munmap(), "fiber stacks"),
 * gives each request its own header state ("per-request headers"), and names a connection
 * shared between fibers in mysqlnd's error 2014. */
#include "async.h"
#include "peregrine.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <dlfcn.h>

#include "php.h"
#include "SAPI.h"
#include "main/php_output.h"
#include "php_network.h"
#include "zend_exceptions.h"
#include "zend_fibers.h"

enum { WAIT_SLEEP = 0, WAIT_READ = 1, WAIT_WRITE = 2, WAIT_PROBE = 3 };
enum { NOT_HOOKED = -1, TIMED_OUT = 0, READY = 1 };

#define HOOKS_CLASS "peregrine\\async\\internal\\hooks"

/* A stream's hooked ops: a copy of its transport's ops with read, write and set_option
 * wrapped. The stream's ops point at `ops`, so the original is found from the stream. */
struct hooked_ops {
	php_stream_ops ops;
	const php_stream_ops *orig;
};

static struct {
	bool installed;
	zend_result (*next_post_startup)(void);
	zif_handler sleep, usleep, nanosleep;
	php_stream_transport_factory tcp, local;
	struct hooked_ops hooked[8];
	int nhooked;
	int io_waits; /* fibers suspended until a socket is ready */
} hooks;

bool pg_async_hooked(void)
{
	return hooks.installed;
}

/* Calls Hooks::$name(...$args) if the class is loaded (never autoloads it): wait($stream, $mode,
 * $timeout) or waitAny($reads, $writes, $timeout). */
static int call_hook(const char *name, zval *args, uint32_t nargs)
{
	zend_class_entry *ce;
	zend_function *fn;
	zval ret;
	int result = NOT_HOOKED;

	if (EG(active_fiber) == NULL || EG(exception) || zend_fiber_switch_blocked())
		return NOT_HOOKED;
	ce = zend_hash_str_find_ptr(EG(class_table), HOOKS_CLASS, sizeof(HOOKS_CLASS) - 1);
	if (ce == NULL || (fn = zend_hash_str_find_ptr_lc(&ce->function_table, name, strlen(name))) == NULL)
		return NOT_HOOKED;
	ZVAL_UNDEF(&ret);
	zend_call_known_function(fn, NULL, ce, &ret, nargs, args, NULL);
	if (Z_TYPE(ret) == IS_LONG)
		result = (int)Z_LVAL(ret);
	zval_ptr_dtor(&ret);
	return EG(exception) ? TIMED_OUT : result;
}

/* Hooks::wait() without a stream: a sleep, or a probe. */
static int call_wait(int mode, double timeout)
{
	zval args[3];

	ZVAL_NULL(&args[0]);
	ZVAL_LONG(&args[1], mode);
	ZVAL_DOUBLE(&args[2], timeout);
	return call_hook("wait", args, 3);
}

/* Waits in the loop until one of fds is ready for its events (POLLIN, POLLOUT), or for timeout
 * seconds (negative: none), through socket streams on dup()s of the fds; the streams, their
 * resources and the copies are gone when this returns. NOT_HOOKED when it cannot wait there
 * (outside a loop fiber, or no fd asks for POLLIN or POLLOUT). */
static int wait_fds(const struct pollfd *fds, nfds_t nfds, double timeout)
{
	zval args[3]; /* readers, writers, timeout */
	int r = NOT_HOOKED, watched = 0;

	if (call_wait(WAIT_PROBE, 0) != READY)
		return NOT_HOOKED;
	array_init(&args[0]);
	array_init(&args[1]);
	ZVAL_DOUBLE(&args[2], timeout);
	for (nfds_t i = 0; i < nfds; i++) {
		for (int w = 0; w < 2; w++) {
			php_stream *s;
			int copy;

			if (fds[i].fd < 0 || !(fds[i].events & (w ? POLLOUT : POLLIN)))
				continue;
			if ((copy = dup(fds[i].fd)) < 0)
				goto out;
			if ((s = php_stream_sock_open_from_socket(copy, NULL)) == NULL) {
				close(copy);
				goto out;
			}
			zval zs;
			php_stream_to_zval(s, &zs); /* the resource's one reference: the array's */
			add_next_index_zval(&args[w], &zs);
			watched++;
		}
	}
	if (watched > 0) {
		hooks.io_waits++;
		r = call_hook("waitAny", args, 3);
		hooks.io_waits--;
	}
out:
	zval_ptr_dtor(&args[0]);
	zval_ptr_dtor(&args[1]);
	return r;
}

/* Waits in the loop for fd to be ready for `mode` (WAIT_READ, WAIT_WRITE). */
static int wait_fd(php_socket_t fd, int mode, double timeout)
{
	struct pollfd p = {.fd = fd, .events = mode == WAIT_WRITE ? POLLOUT : POLLIN, .revents = 0};

	return wait_fds(&p, 1, timeout);
}

static int real_poll(struct pollfd *fds, nfds_t nfds, int timeout);

static bool fd_ready(php_socket_t fd, short events)
{
	struct pollfd p = {.fd = fd, .events = events, .revents = 0};

	return real_poll(&p, 1, 0) != 0; /* ready, or an error the original op reports */
}

static double seconds(const struct timeval *tv)
{
	return tv == NULL || tv->tv_sec < 0 ? -1.0 : (double)tv->tv_sec + tv->tv_usec / 1e6;
}

/* ---- sleep(), usleep(), time_nanosleep() ---- */

static bool sleep_hooked(double secs)
{
	if (EG(active_fiber) == NULL)
		return false;
	return call_wait(WAIT_SLEEP, secs) != NOT_HOOKED || EG(exception);
}

static ZEND_NAMED_FUNCTION(hooked_sleep)
{
	zend_long secs;

	if (EG(active_fiber) == NULL || zend_parse_parameters(ZEND_NUM_ARGS(), "l", &secs) == FAILURE || secs < 0
	    || !sleep_hooked((double)secs)) {
		if (!EG(exception))
			hooks.sleep(INTERNAL_FUNCTION_PARAM_PASSTHRU);
		return;
	}
	if (!EG(exception))
		RETURN_LONG(0);
}

static ZEND_NAMED_FUNCTION(hooked_usleep)
{
	zend_long usec;

	if (EG(active_fiber) == NULL || zend_parse_parameters(ZEND_NUM_ARGS(), "l", &usec) == FAILURE || usec < 0
	    || !sleep_hooked(usec / 1e6)) {
		if (!EG(exception))
			hooks.usleep(INTERNAL_FUNCTION_PARAM_PASSTHRU);
	}
}

static ZEND_NAMED_FUNCTION(hooked_nanosleep)
{
	zend_long sec, nsec;

	if (EG(active_fiber) == NULL || zend_parse_parameters(ZEND_NUM_ARGS(), "ll", &sec, &nsec) == FAILURE
	    || sec < 0 || nsec < 0 || nsec > 999999999 || !sleep_hooked(sec + nsec / 1e9)) {
		if (!EG(exception))
			hooks.nanosleep(INTERNAL_FUNCTION_PARAM_PASSTHRU);
		return;
	}
	if (!EG(exception))
		RETURN_TRUE;
}

static void replace_handler(const char *name, zif_handler with, zif_handler *orig)
{
	zend_function *fn = zend_hash_str_find_ptr(CG(function_table), name, strlen(name));

	if (fn != NULL && fn->type == ZEND_INTERNAL_FUNCTION) {
		*orig = fn->internal_function.handler;
		fn->internal_function.handler = with;
	}
}

/* ---- socket streams ---- */

static const php_stream_ops *orig_ops(php_stream *stream)
{
	return ((const struct hooked_ops *)stream->ops)->orig;
}

static php_netstream_data_t *sock_of(php_stream *stream)
{
	php_netstream_data_t *sock = stream->abstract; /* OpenSSL's data begins with it too */

	return sock != NULL && sock->socket >= 0 && sock->is_blocked ? sock : NULL;
}

/* Inside a fiber, waits in the loop until the stream's socket is ready for events (POLLIN or
 * POLLOUT): 1 when it is (or need not wait), 0 after the stream's timeout (timeout_event set),
 * -1 when the wait ended in an exception (the request was cancelled). */
static int wait_ready(php_stream *stream, short events, int kind)
{
	php_netstream_data_t *sock = sock_of(stream);

	if (sock == NULL || !EG(active_fiber) || fd_ready(sock->socket, events))
		return 1;
	int r = wait_fd(sock->socket, kind, seconds(&sock->timeout));
	if (EG(exception))
		return -1;
	if (r == TIMED_OUT) {
		sock->timeout_event = 1;
		return 0;
	}
	return 1;
}

static ssize_t hooked_read(php_stream *stream, char *buf, size_t count)
{
	const php_stream_ops *mine = stream->ops;
	ssize_t n;
	int ready = wait_ready(stream, POLLIN, WAIT_READ);

	if (ready <= 0)
		return ready;
	stream->ops = orig_ops(stream);
	n = stream->ops->read(stream, buf, count);
	stream->ops = mine;
	return n;
}

static ssize_t hooked_write(php_stream *stream, const char *buf, size_t count)
{
	const php_stream_ops *mine = stream->ops;
	ssize_t n;
	int ready = wait_ready(stream, POLLOUT, WAIT_WRITE);

	if (ready <= 0)
		return ready;
	stream->ops = orig_ops(stream);
	n = stream->ops->write(stream, buf, count);
	stream->ops = mine;
	return n;
}

static int orig_set_option(php_stream *stream, int option, int value, void *ptr)
{
	const php_stream_ops *mine = stream->ops;
	int r;

	stream->ops = orig_ops(stream);
	r = stream->ops->set_option(stream, option, value, ptr);
	stream->ops = mine;
	return r;
}

/* Connects without blocking the worker: the original connect made asynchronous, then the
 * fiber waits for the socket to become writable and reads the outcome. A failure is retried
 * the blocking way, which tries every address the name has (the asynchronous connect stops at
 * the first). */
static int hooked_connect(php_stream *stream, int option, int value, php_stream_xport_param *x)
{
	php_netstream_data_t *sock = stream->abstract;
	int ret, err = 0, r;
	socklen_t len = sizeof(err);

	if (call_wait(WAIT_PROBE, 0) != READY)
		return orig_set_option(stream, option, value, x);
	x->op = STREAM_XPORT_OP_CONNECT_ASYNC;
	ret = orig_set_option(stream, option, value, x);
	x->op = STREAM_XPORT_OP_CONNECT;
	if (ret != PHP_STREAM_OPTION_RETURN_OK || x->outputs.returncode != 1 || sock == NULL || sock->socket < 0)
		return ret;
	r = wait_fd(sock->socket, WAIT_WRITE, seconds(x->inputs.timeout));
	if (EG(exception) || r == TIMED_OUT) {
		x->outputs.returncode = -1;
		x->outputs.error_code = ETIMEDOUT;
		if (x->want_errortext && !EG(exception))
			x->outputs.error_text = zend_string_init("Connection timed out", 20, 0);
		return PHP_STREAM_OPTION_RETURN_OK;
	}
	if (getsockopt(sock->socket, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0) {
		php_set_sock_blocking(sock->socket, 1);
		x->outputs.returncode = 0;
		x->outputs.error_code = 0;
		return PHP_STREAM_OPTION_RETURN_OK;
	}
	closesocket(sock->socket);
	sock->socket = -1;
	if (x->outputs.error_text) {
		zend_string_release(x->outputs.error_text);
		x->outputs.error_text = NULL;
	}
	return orig_set_option(stream, option, value, x);
}

static php_stream *hook_stream(php_stream *stream);

static int hooked_set_option(php_stream *stream, int option, int value, void *ptr)
{
	if (option == PHP_STREAM_OPTION_CRYPTO_API) {
		stream->ops = orig_ops(stream); /* TLS from now on: left to PHP for good */
		return stream->ops->set_option(stream, option, value, ptr);
	}
	if (option == PHP_STREAM_OPTION_XPORT_API && EG(active_fiber)) {
		php_stream_xport_param *x = ptr;
		php_netstream_data_t *sock = sock_of(stream);

		if (x->op == STREAM_XPORT_OP_CONNECT)
			return hooked_connect(stream, option, value, x);
		if (x->op == STREAM_XPORT_OP_ACCEPT && sock != NULL) {
			int ret;

			if (!fd_ready(sock->socket, POLLIN))
				wait_fd(sock->socket, WAIT_READ, seconds(x->inputs.timeout));
			if (EG(exception)) {
				x->outputs.returncode = -1;
				x->outputs.client = NULL;
				return PHP_STREAM_OPTION_RETURN_OK;
			}
			ret = orig_set_option(stream, option, value, ptr);
			hook_stream(x->outputs.client); /* the accepted stream got the original ops */
			return ret;
		}
	}
	return orig_set_option(stream, option, value, ptr);
}

/* The hooked copy of `orig`, made on first use; NULL when the table is full. */
static const php_stream_ops *hooked_for(const php_stream_ops *orig)
{
	for (int i = 0; i < hooks.nhooked; i++) {
		if (hooks.hooked[i].orig == orig || &hooks.hooked[i].ops == orig)
			return &hooks.hooked[i].ops;
	}
	if (hooks.nhooked == (int)(sizeof(hooks.hooked) / sizeof(*hooks.hooked)) || orig->read == NULL
	    || orig->write == NULL || orig->set_option == NULL)
		return NULL;
	struct hooked_ops *h = &hooks.hooked[hooks.nhooked++];
	h->ops = *orig;
	h->ops.read = hooked_read;
	h->ops.write = hooked_write;
	h->ops.set_option = hooked_set_option;
	h->orig = orig;
	return &h->ops;
}

static php_stream *hook_stream(php_stream *stream)
{
	const php_stream_ops *ops;

	if (stream != NULL && (ops = hooked_for(stream->ops)) != NULL)
		stream->ops = ops;
	return stream;
}

static php_stream *tcp_factory(const char *proto, size_t protolen, const char *resourcename, size_t resourcenamelen,
			       const char *persistent_id, int options, int flags, struct timeval *timeout,
			       php_stream_context *context STREAMS_DC)
{
	return hook_stream(hooks.tcp(proto, protolen, resourcename, resourcenamelen, persistent_id, options, flags,
				     timeout, context STREAMS_REL_CC));
}

static php_stream *unix_factory(const char *proto, size_t protolen, const char *resourcename, size_t resourcenamelen,
				const char *persistent_id, int options, int flags, struct timeval *timeout,
				php_stream_context *context STREAMS_DC)
{
	return hook_stream(hooks.local(proto, protolen, resourcename, resourcenamelen, persistent_id, options, flags,
				      timeout, context STREAMS_REL_CC));
}

static void wrap_transport(const char *name, php_stream_transport_factory with, php_stream_transport_factory *orig)
{
	php_stream_transport_factory f = zend_hash_str_find_ptr(php_stream_xport_get_hash(), name, strlen(name));

	if (f != NULL) {
		*orig = f;
		php_stream_xport_register(name, with);
	}
}

/* ---- poll() ----
 *
 * The program's own poll() comes before libc's for libphp and for the libraries loaded into the
 * global scope (poll_clients, below: PHP loads extensions with RTLD_DEEPBIND, which would bind
 * their libraries to libc's), so what waits with poll() waits in the loop too: PHP's
 * php_pollfd_for() under TLS streams (OpenSSL's handshake and its reads and writes), libpq's
 * waits for its socket, and libcurl's for its sockets and its wakeup pipe (curl_exec(),
 * curl_multi_select()). Every call outside a loop fiber or off PHP's thread, and a call with a
 * timeout of 0, goes straight to libc's. A wait that the request's cancellation ends fails with
 * ECANCELED, so that the library gives up (libcurl would poll again and again on a timeout). */

static int real_poll(struct pollfd *fds, nfds_t nfds, int timeout)
{
	static int (*libc_poll)(struct pollfd *, nfds_t, int);

	if (libc_poll == NULL)
		libc_poll = (int (*)(struct pollfd *, nfds_t, int))dlsym(RTLD_NEXT, "poll");
	return libc_poll(fds, nfds, timeout);
}

/* glibc declares poll()'s array write-only; this one reads the caller's request in it. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
int poll(struct pollfd *fds, nfds_t nfds, int timeout)
{
	int r, w;

	/* PHP's thread is the main one (a forked worker's too): gettid() is the pid. */
	if (!hooks.installed || nfds == 0 || timeout == 0 || gettid() != getpid() || EG(active_fiber) == NULL)
		return real_poll(fds, nfds, timeout);
	r = real_poll(fds, nfds, 0);
	if (r != 0)
		return r;
	w = wait_fds(fds, nfds, timeout < 0 ? -1.0 : timeout / 1000.0);
	if (EG(exception)) {
		/* Cancelled: the caller fails at once (a timeout would have curl_exec() poll again
		 * and again), and the exception surfaces once PHP runs again. */
		errno = ECANCELED;
		return -1;
	}
	if (w == NOT_HOOKED)
		return real_poll(fds, nfds, timeout);
	if (w != READY) {
		for (nfds_t i = 0; i < nfds; i++)
			fds[i].revents = 0;
		return 0;
	}
	return real_poll(fds, nfds, 0);
}
#pragma GCC diagnostic pop

/* ---- fiber stacks ----
 *
 * Every request runs in a new Fiber (what a library keeps per fiber must not reach the next
 * request), and PHP maps a stack for each (mmap of fiber.stack_size and a guard page, with
 * MAP_STACK; a prctl; an mprotect) and unmaps it when the fiber is freed: with the page faults of
 * a fresh stack, that doubled the worker's CPU for a request that only waits (30 -> 57 us,
 * BenchmarkAsyncShortWaits). The program's mmap() and munmap() come before libc's for libphp, as
 * poll() does: on PHP's thread, with PEREGRINE_CONCURRENCY > 1, a stack mapped with MAP_STACK
 * (PHP's fibers only: glibc maps thread stacks and malloc's memory with its own internal calls)
 * is remembered, and when it is unmapped it is kept instead, up to STACKS_KEPT, for the next
 * fiber, its pages and its guard still in place. The kept stacks are the process's; their pages
 * hold what an earlier fiber left on its stack, which PHP code cannot read. */

enum { STACKS_KEPT = 256 };

static struct {
	void *kept[STACKS_KEPT];
	size_t kept_len; /* the length of the kept stacks: all of one size */
	int nkept;
	void **live;     /* the stacks handed out: an open-addressing set, NULL for empty */
	size_t cap, count;
} stacks;

static void *real_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	static void *(*libc_mmap)(void *, size_t, int, int, int, off_t);

	if (libc_mmap == NULL)
		libc_mmap = (void *(*)(void *, size_t, int, int, int, off_t))dlsym(RTLD_NEXT, "mmap");
	return libc_mmap(addr, len, prot, flags, fd, off);
}

static int real_munmap(void *addr, size_t len)
{
	static int (*libc_munmap)(void *, size_t);

	if (libc_munmap == NULL)
		libc_munmap = (int (*)(void *, size_t))dlsym(RTLD_NEXT, "munmap");
	return libc_munmap(addr, len);
}

static size_t live_slot(const void *p, size_t cap)
{
	return (size_t)(((uintptr_t)p >> 12) * UINT64_C(0x9E3779B97F4A7C15) >> 20) & (cap - 1);
}

static void live_put(void **table, size_t cap, void *p)
{
	size_t i = live_slot(p, cap);

	while (table[i] != NULL)
		i = (i + 1) & (cap - 1);
	table[i] = p;
}

/* Adds p; false if the set cannot grow (p is then unmapped the usual way). */
static bool live_add(void *p)
{
	if ((stacks.count + 1) * 2 > stacks.cap) {
		size_t cap = stacks.cap ? stacks.cap * 2 : 512;
		void **table = calloc(cap, sizeof(*table));

		if (table == NULL)
			return false;
		for (size_t i = 0; i < stacks.cap; i++)
			if (stacks.live[i] != NULL)
				live_put(table, cap, stacks.live[i]);
		free(stacks.live);
		stacks.live = table;
		stacks.cap = cap;
	}
	live_put(stacks.live, stacks.cap, p);
	stacks.count++;
	return true;
}

/* Removes p (shifting back the entries after it); false if it is not in the set. */
static bool live_remove(const void *p)
{
	size_t i = live_slot(p, stacks.cap), j;

	while (stacks.live[i] != p) {
		if (stacks.live[i] == NULL)
			return false;
		i = (i + 1) & (stacks.cap - 1);
	}
	stacks.live[i] = NULL;
	stacks.count--;
	for (j = (i + 1) & (stacks.cap - 1); stacks.live[j] != NULL; j = (j + 1) & (stacks.cap - 1)) {
		void *q = stacks.live[j];

		stacks.live[j] = NULL;
		live_put(stacks.live, stacks.cap, q);
	}
	return true;
}

void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	void *p;

	if (!(flags & MAP_STACK) || !hooks.installed || addr != NULL || fd != -1 || prot != (PROT_READ | PROT_WRITE) ||
	    gettid() != getpid())
		return real_mmap(addr, len, prot, flags, fd, off);
	if (stacks.nkept > 0 && len == stacks.kept_len)
		p = stacks.kept[--stacks.nkept];
	else if ((p = real_mmap(addr, len, prot, flags, fd, off)) == MAP_FAILED)
		return p;
	if (!live_add(p)) {
		real_munmap(p, len);
		return real_mmap(addr, len, prot, flags, fd, off);
	}
	return p;
}

int munmap(void *addr, size_t len)
{
	if (stacks.count == 0 || gettid() != getpid() || !live_remove(addr))
		return real_munmap(addr, len);
	if (stacks.nkept < STACKS_KEPT && (stacks.nkept == 0 || len == stacks.kept_len)) {
		stacks.kept_len = len;
		stacks.kept[stacks.nkept++] = addr;
		return 0;
	}
	return real_munmap(addr, len);
}

/* ---- per-request headers ----
 *
 * A concurrent worker's requests all run inside the worker script's one long PHP request, whose
 * one header list nothing ever sends: header(), setcookie() and http_response_code() of every
 * request piled up there for the life of the process. Each request has its own state instead
 * (Peregrine\Async\Internal\Server): peregrine_headers_open() makes it when the request starts,
 * the loop makes it PHP's live state while it runs one of the request's fibers
 * (peregrine_headers_switch()), and peregrine_headers_close() hands its headers to the answer and
 * frees it. Code that runs for no open request (the loop itself, reset hooks, an async() fiber
 * that outlived its request) has the process's state, whose headers are dropped whenever the loop
 * switches away from it. A request's state starts with no header, status 200, nothing sent and
 * no default Content-Type (its output goes to the log, not to its client).
 *
 * The output buffers are part of it: with the process's one stack of them, a request that
 * suspended inside ob_start() ... ob_get_clean() (a template that queries a database) had what
 * another request echoed meanwhile in its buffer, or its own output in the other's: one client's
 * page in another's answer. Each request starts with no buffer; the ones it leaves open are
 * ended when it closes, their contents going where its unbuffered output goes (the log). */

struct header_state {
	sapi_headers_struct headers;
	unsigned char sent;
	zend_string *output_file; /* where output started (headers_sent()'s file and line) */
	int output_line;
	zend_stack handlers; /* its output buffers: OG(handlers), OG(active), OG(running) */
	php_output_handler *active, *running;
};

static struct {
	HashTable *open;             /* request id => struct header_state *, emalloc'd */
	zend_long current;           /* the open request whose state is live in SG(), or 0 */
	struct header_state process; /* the process's state while a request's is live */
} hdr;

static void header_free(void *h)
{
	sapi_free_header((sapi_header_struct *)h);
}

static void state_save(struct header_state *s)
{
	s->headers = SG(sapi_headers);
	s->sent = SG(headers_sent);
	s->output_file = OG(output_start_filename);
	s->output_line = OG(output_start_lineno);
	s->handlers = OG(handlers);
	s->active = OG(active);
	s->running = OG(running);
}

static void state_load(const struct header_state *s)
{
	SG(sapi_headers) = s->headers;
	SG(headers_sent) = s->sent;
	OG(output_start_filename) = s->output_file;
	OG(output_start_lineno) = s->output_line;
	OG(handlers) = s->handlers;
	OG(active) = s->active;
	OG(running) = s->running;
}

static void state_init(struct header_state *s)
{
	memset(s, 0, sizeof(*s));
	zend_llist_init(&s->headers.headers, sizeof(sapi_header_struct), header_free, 0);
	s->headers.http_response_code = 200;
	zend_stack_init(&s->handlers, sizeof(php_output_handler *));
}

static void state_destroy(struct header_state *s)
{
	zend_llist_destroy(&s->headers.headers);
	if (s->headers.mimetype != NULL)
		efree(s->headers.mimetype);
	if (s->headers.http_status_line != NULL)
		efree(s->headers.http_status_line);
	if (s->output_file != NULL)
		zend_string_release(s->output_file);
	zend_stack_destroy(&s->handlers); /* empty: pg_headers_close() ended them */
}

/* Makes request `to`'s state live (the process's if `to` is not open), putting the live one away. */
static void headers_switch(zend_long to)
{
	struct header_state *next = NULL;

	if (hdr.open == NULL)
		return;
	if (to != 0 && (next = zend_hash_index_find_ptr(hdr.open, (zend_ulong)to)) == NULL)
		to = 0;
	if (to == hdr.current)
		return;
	if (hdr.current != 0) {
		state_save(zend_hash_index_find_ptr(hdr.open, (zend_ulong)hdr.current));
	} else {
		zend_llist_clean(&SG(sapi_headers).headers); /* they would reach no client */
		state_save(&hdr.process);
	}
	state_load(next != NULL ? next : &hdr.process);
	hdr.current = to;
}

/* discard_left ends the live state's output buffers, which its request left open, without
 * running their handlers (a user's callback could throw, or find output locked, where the loop
 * closes a request: the worker would die): what each holds goes to the log, as the request's
 * unbuffered output does, bottom first. An async() fiber of the request that outlives it and
 * opened one of them finds it gone. */
static void discard_left(void)
{
	php_output_handler **h = (php_output_handler **)zend_stack_base(&OG(handlers));
	int n = zend_stack_count(&OG(handlers));

	for (int i = 0; i < n; i++) {
		for (size_t done = 0; done < h[i]->buffer.used;) {
			ssize_t w = write(STDOUT_FILENO, h[i]->buffer.data + done, h[i]->buffer.used - done);
			if (w < 0 && errno == EINTR)
				continue;
			if (w <= 0)
				break;
			done += (size_t)w;
		}
		h[i]->flags |= PHP_OUTPUT_HANDLER_DISABLED;
	}
	php_output_discard_all();
}

/* peregrine_headers_open(int $request): void, a state of its own for request $request. */
static ZEND_NAMED_FUNCTION(pg_headers_open)
{
	zend_long id;
	struct header_state *s;

	ZEND_PARSE_PARAMETERS_START(1, 1)
		Z_PARAM_LONG(id)
	ZEND_PARSE_PARAMETERS_END();
	if (id <= 0) {
		zend_argument_value_error(1, "must be a request id above 0");
		RETURN_THROWS();
	}
	if (hdr.open == NULL) {
		ALLOC_HASHTABLE(hdr.open);
		zend_hash_init(hdr.open, 64, NULL, NULL, 0);
	}
	if (zend_hash_index_exists(hdr.open, (zend_ulong)id))
		return;
	s = emalloc(sizeof(*s));
	state_init(s);
	zend_hash_index_add_new_ptr(hdr.open, (zend_ulong)id, s);
}

/* peregrine_headers_switch(int $request): void; 0, or a request that is not open: the process's. */
static ZEND_NAMED_FUNCTION(pg_headers_switch)
{
	zend_long id;

	ZEND_PARSE_PARAMETERS_START(1, 1)
		Z_PARAM_LONG(id)
	ZEND_PARSE_PARAMETERS_END();
	headers_switch(id);
}

/* peregrine_headers_close(int $request): ?array, [status, [header lines]] of request $request,
 * whose state is freed (what it sets later goes to the process's and is dropped); null if it
 * was not open. */
static ZEND_NAMED_FUNCTION(pg_headers_close)
{
	zend_long id;
	struct header_state *s;
	zend_llist_position pos;
	zval lines;

	ZEND_PARSE_PARAMETERS_START(1, 1)
		Z_PARAM_LONG(id)
	ZEND_PARSE_PARAMETERS_END();
	if (hdr.open == NULL || (s = zend_hash_index_find_ptr(hdr.open, (zend_ulong)id)) == NULL)
		RETURN_NULL();
	/* One of its fibers (an async() one that outlives it) suspended inside an output handler
	 * returns into its buffers: they, and its state, stay for that fiber (never freed: a few
	 * hundred bytes, for a case this rare). */
	bool kept = hdr.current == id ? OG(running) != NULL : s->running != NULL;
	if (!kept && (hdr.current == id ? OG(active) != NULL : s->active != NULL)) {
		zend_long was = hdr.current;
		headers_switch(id);
		discard_left();
		if (was != id)
			headers_switch(was);
	}
	if (hdr.current == id) {
		state_save(s);
		state_load(&hdr.process);
		hdr.current = 0;
	}
	array_init(return_value);
	add_next_index_long(return_value, s->headers.http_response_code);
	array_init(&lines);
	for (sapi_header_struct *h = zend_llist_get_first_ex(&s->headers.headers, &pos); h != NULL;
	     h = zend_llist_get_next_ex(&s->headers.headers, &pos))
		add_next_index_stringl(&lines, h->header, h->header_len);
	add_next_index_zval(return_value, &lines);
	if (kept) {
		zend_llist_clean(&s->headers.headers); /* answered: what it sets later reaches no client */
		return;
	}
	state_destroy(s);
	efree(s);
	zend_hash_index_del(hdr.open, (zend_ulong)id);
}

ZEND_BEGIN_ARG_WITH_RETURN_TYPE_INFO_EX(arginfo_pg_headers_open, 0, 1, IS_VOID, 0)
	ZEND_ARG_TYPE_INFO(0, request, IS_LONG, 0)
ZEND_END_ARG_INFO()

ZEND_BEGIN_ARG_WITH_RETURN_TYPE_INFO_EX(arginfo_pg_headers_close, 0, 1, IS_ARRAY, 1)
	ZEND_ARG_TYPE_INFO(0, request, IS_LONG, 0)
ZEND_END_ARG_INFO()

/* ---- a connection shared between fibers ----
 *
 * mysqlnd refuses a query on a connection whose last query it has not read to its end: PDO says
 * "General error: 2014 Cannot execute queries while other unbuffered queries are active.
 * Consider using PDOStatement::fetchAll()", mysqli "Commands out of sync" (2014), libpq "another
 * command is already in progress". In a concurrent worker that is most often one connection used
 * by two requests (or async() fibers) at once, which none of these messages says: the exception
 * gets it said where it is thrown, inside a fiber, while another fiber waits for a socket. */

static void (*next_throw_hook)(zend_object *ex);

static bool is_a(const zend_class_entry *ce, const char *name)
{
	for (; ce != NULL; ce = ce->parent)
		if (zend_binary_strcasecmp(ZSTR_VAL(ce->name), ZSTR_LEN(ce->name), name, strlen(name)) == 0)
			return true;
	return false;
}

static bool connection_busy(zend_object *ex, const char *message)
{
	zval rv, *code;

	if (is_a(ex->ce, "PDOException"))
		return strstr(message, "General error: 2014 ") != NULL || strstr(message, "another command is already in progress") != NULL;
	if (!is_a(ex->ce, "mysqli_sql_exception"))
		return false;
	code = zend_read_property_ex(zend_ce_exception, ex, ZSTR_KNOWN(ZEND_STR_CODE), 1, &rv);
	return Z_TYPE_P(code) == IS_LONG && Z_LVAL_P(code) == 2014;
}

static void name_shared_connection(zend_object *ex)
{
	zval rv, *message, named;

	if (next_throw_hook != NULL)
		next_throw_hook(ex);
	/* With no other fiber waiting for a socket, no other can be amid a query on this one. */
	if (EG(active_fiber) == NULL || hooks.io_waits == 0 || !instanceof_function(ex->ce, zend_ce_exception))
		return;
	message = zend_read_property_ex(zend_ce_exception, ex, ZSTR_KNOWN(ZEND_STR_MESSAGE), 1, &rv);
	if (Z_TYPE_P(message) != IS_STRING || !connection_busy(ex, Z_STRVAL_P(message)))
		return;
	ZVAL_STR(&named, zend_strpprintf(0, "%s [Peregrine: in a concurrent worker this most likely means that one connection "
					   "was used by two requests or fibers at once (a PDO or mysqli object kept in a static, "
					   "a global or a shared service): open one per request, or take one from a "
					   "Peregrine\\Async\\Pool; docs/concurrency.md]",
					   Z_STRVAL_P(message)));
	zend_update_property_ex(zend_ce_exception, ex, ZSTR_KNOWN(ZEND_STR_MESSAGE), &named);
	zval_ptr_dtor(&named);
}

/* ---- peregrine_async_pipe() ---- */

/* peregrine_async_pipe(int $fd): resource, a stream on a dup() of fd 3 (requests) or fd 4
 * (answers), for Peregrine\Async's request loop: PHP gives php://fd to the CLI only. */
static ZEND_NAMED_FUNCTION(pg_async_pipe)
{
	zend_long fd;
	php_stream *s;
	int copy;

	ZEND_PARSE_PARAMETERS_START(1, 1)
		Z_PARAM_LONG(fd)
	ZEND_PARSE_PARAMETERS_END();
	if (fd != 3 && fd != 4) {
		zend_argument_value_error(1, "must be 3 or 4");
		RETURN_THROWS();
	}
	if (pg_direct_fibers()) { /* direct mode: the requests are the clients' (direct.c) */
		php_stream_to_zval(pg_direct_stream((int)fd), return_value);
		return;
	}
	copy = fcntl((int)fd, F_DUPFD_CLOEXEC, 5);
	if (copy < 0 || (s = php_stream_fopen_from_fd(copy, fd == 3 ? "rb" : "wb", NULL)) == NULL) {
		if (copy >= 0)
			close(copy);
		zend_throw_error(NULL, "peregrine_async_pipe(%d): %s", (int)fd, strerror(errno));
		RETURN_THROWS();
	}
	php_stream_to_zval(s, return_value);
}

ZEND_BEGIN_ARG_INFO_EX(arginfo_pg_async_pipe, 0, 0, 1)
	ZEND_ARG_TYPE_INFO(0, fd, IS_LONG, 0)
ZEND_END_ARG_INFO()

/* ---- backpressure in direct mode (direct.c, HELD_CAP) ---- */

/* peregrine_direct_full(int $request): bool, whether the connection of request $request holds
 * so much of its answers unsent that its fiber must wait before it writes more (false outside
 * direct mode). */
static ZEND_NAMED_FUNCTION(pg_direct_full_fn)
{
	zend_long id;

	ZEND_PARSE_PARAMETERS_START(1, 1)
		Z_PARAM_LONG(id)
	ZEND_PARSE_PARAMETERS_END();
	RETURN_BOOL(id > 0 && id <= UINT32_MAX && pg_direct_full((uint32_t)id));
}

/* peregrine_direct_drained(): list<int>, the requests told full since the last call whose
 * connection has room again. */
static ZEND_NAMED_FUNCTION(pg_direct_drained_fn)
{
	const uint32_t *ids;
	size_t n;

	ZEND_PARSE_PARAMETERS_NONE();
	n = pg_direct_drained(&ids);
	array_init_size(return_value, (uint32_t)n);
	for (size_t i = 0; i < n; i++)
		add_next_index_long(return_value, (zend_long)ids[i]);
}

ZEND_BEGIN_ARG_WITH_RETURN_TYPE_INFO_EX(arginfo_pg_direct_full, 0, 1, _IS_BOOL, 0)
	ZEND_ARG_TYPE_INFO(0, request, IS_LONG, 0)
ZEND_END_ARG_INFO()

ZEND_BEGIN_ARG_WITH_RETURN_TYPE_INFO_EX(arginfo_pg_direct_drained, 0, 0, IS_ARRAY, 0)
ZEND_END_ARG_INFO()

static const zend_function_entry functions[] = {
	ZEND_RAW_FENTRY("peregrine_async_pipe", pg_async_pipe, arginfo_pg_async_pipe, 0)
	ZEND_RAW_FENTRY("peregrine_headers_open", pg_headers_open, arginfo_pg_headers_open, 0)
	ZEND_RAW_FENTRY("peregrine_headers_switch", pg_headers_switch, arginfo_pg_headers_open, 0)
	ZEND_RAW_FENTRY("peregrine_headers_close", pg_headers_close, arginfo_pg_headers_close, 0)
	ZEND_RAW_FENTRY("peregrine_direct_full", pg_direct_full_fn, arginfo_pg_direct_full, 0)
	ZEND_RAW_FENTRY("peregrine_direct_drained", pg_direct_drained_fn, arginfo_pg_direct_drained, 0)
	ZEND_FE_END
};

/* ---- installation ---- */

static zend_result install(void)
{
	const char *n = getenv("PEREGRINE_CONCURRENCY");

	/* As PHP registers a SAPI's additional functions: under "standard" (OPcache's optimizer
	 * reads the module of every internal function it meets). */
	EG(current_module) = zend_hash_str_find_ptr(&module_registry, "standard", sizeof("standard") - 1);
	if (EG(current_module) != NULL)
		zend_register_functions(NULL, functions, NULL, MODULE_PERSISTENT);
	EG(current_module) = NULL;
	if (n != NULL && atoi(n) > 1) {
		replace_handler("sleep", hooked_sleep, &hooks.sleep);
		replace_handler("usleep", hooked_usleep, &hooks.usleep);
		replace_handler("time_nanosleep", hooked_nanosleep, &hooks.nanosleep);
		wrap_transport("tcp", tcp_factory, &hooks.tcp);
		wrap_transport("unix", unix_factory, &hooks.local);
		hooks.installed = hooks.sleep && hooks.usleep && hooks.nanosleep && hooks.tcp && hooks.local;
		next_throw_hook = zend_throw_exception_hook;
		zend_throw_exception_hook = name_shared_connection;
	}
	return hooks.next_post_startup ? hooks.next_post_startup() : SUCCESS;
}

/* libpq (pgsql, PDO pgsql) and libcurl (curl). */
static const char *const poll_clients[] = {"libpq.so.5", "libcurl.so.4"};

/* Runs before main(): PHP calls zend_post_startup_cb once its modules have started (OPcache
 * chains it the same way), when the function table and the transports are complete. */
__attribute__((constructor)) static void pg_async_register(void)
{
	const char *n = getenv("PEREGRINE_CONCURRENCY");

	hooks.next_post_startup = zend_post_startup_cb;
	zend_post_startup_cb = install;
	/* PHP loads extensions with RTLD_DEEPBIND, so the libraries an extension brings look up
	 * poll() in their own dependencies first: libc's, not this program's. The C clients that
	 * wait in poll() are loaded here first, before PHP loads any extension, into the global
	 * scope, where this program comes first; the extensions then find them loaded. A client
	 * that is not installed is skipped. */
	if (n != NULL && atoi(n) > 1) {
		for (size_t i = 0; i < sizeof(poll_clients) / sizeof(*poll_clients); i++)
			dlopen(poll_clients[i], RTLD_LAZY | RTLD_GLOBAL);
	}
}
