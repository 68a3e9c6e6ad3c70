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
 * do. */
#include "async.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <dlfcn.h>

#include "php.h"
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
	if (watched > 0)
		r = call_hook("waitAny", args, 3);
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

static const zend_function_entry functions[] = {
	ZEND_RAW_FENTRY("peregrine_async_pipe", pg_async_pipe, arginfo_pg_async_pipe, 0)
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
