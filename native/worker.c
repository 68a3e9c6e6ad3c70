/* worker.c: worker mode. The worker script runs as one long PHP request; each call of
 * peregrine_handle_request() serves one REQUEST inside it, resetting around the handler what
 * PHP-FPM's request startup and shutdown would reset:
 *
 *   wait:  the script's output buffers flushed to the log, READY sent once, the next REQUEST read
 *   begin: SAPI state (headers, status, POST and uploads read by PHP), superglobals, session and
 *          filter state, shutdown functions and ini settings set aside, time limit armed (below)
 *   call:  the handler; exit() and uncaught exceptions end it, a fatal error ends the worker
 *   end:   shutdown functions of the request, output, session written, the answer and DONE
 *          sent (with LAST after a fatal error), then uploads deleted, ini settings restored,
 *          unread body discarded
 *   exit:  when the script ends, for whatever reason, DONE with LAST says it reads no more
 *
 * $_SERVER is registered for a request only if something may read it, as PHP-FPM's
 * auto_globals_jit decides per request: FPM creates it when a script that names $_SERVER is
 * compiled or loaded from OPcache during the request. A worker compiles its code once, so here
 * it is created for every request from the first time code that names $_SERVER was compiled or
 * loaded in this process (or filter_input(INPUT_SERVER), phpinfo() and the like asked for it),
 * and until then only on demand, by the same trigger (the auto global stays armed, as no
 * request created it). Registering it costs about half as much as the rest of a raw hello-world
 * request (docs/benchmarks.md). With auto_globals_jit off, or code preloaded that names it, every
 * request has it.
 */
#include "peregrine.h"

#include <sys/time.h>
#include <time.h>

#include "ext/standard/basic_functions.h"
#include "ext/standard/head.h"
#include "main/php_main.h"
#include "main/php_output.h"
#include "main/php_variables.h"
#include "Zend/zend_exceptions.h"

/* What the request set aside, to put back at its end. */
static struct {
	HashTable *shutdown_functions; /* the script's own, registered before the request */
	HashTable ini;                 /* ini settings the script had changed: name => value */
	bool booted;                   /* the first request ended the boot's session and filter state */
} saved;

/* The time limit (max_execution_time), which counts per request. PHP arms ITIMER_PROF at each
 * request's start and disarms it at its end: two system calls a request, half of a hello world
 * worker's (docs/benchmarks.md). Here the timer stays armed after a request, and a request arms
 * it again only when the last arming is older than TIMER_SLACK of wall time, or had another
 * limit, or may have been disarmed since (the request changed max_execution_time, whose ini
 * restore disarms it). This process runs one thread, so its CPU time (what ITIMER_PROF counts)
 * never runs faster than wall time: a request's limit falls between max_execution_time less
 * TIMER_SLACK and max_execution_time. Between requests the worker waits on a read, which uses no
 * CPU; the worker script's own work between two requests counts toward the next one's limit
 * until it is armed again. A forked worker starts disarmed: timers are not inherited. */
#define TIMER_SLACK 0.1 /* seconds */

static struct {
	bool known;        /* false until a request armed it, and after PHP may have changed it */
	double at;         /* CLOCK_MONOTONIC seconds of the last arming; 0: disarmed */
	zend_long seconds; /* the limit it was armed with */
} timer;

static double monotonic_seconds(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void arm_time_limit(void)
{
	zend_long seconds = EG(timeout_seconds);
	double now;

	if (seconds <= 0) {
		if (!timer.known || timer.at != 0) {
			/* zend_unset_timeout() would not: it disarms only under a limit of its own */
			struct itimerval off = {0};
			setitimer(ITIMER_PROF, &off, NULL);
		}
		timer.known = true;
		timer.at = 0;
		return;
	}
	now = monotonic_seconds();
	if (timer.known && timer.at != 0 && timer.seconds == seconds && now - timer.at < TIMER_SLACK)
		return;
	zend_set_timeout(seconds, 0);
	timer.known = true;
	timer.at = now;
	timer.seconds = seconds;
}

/* Before the ini settings are restored: a request that changed max_execution_time leaves the
 * timer in a state only PHP knows. */
static void time_limit_end(void)
{
	if (EG(modified_ini_directives) != NULL &&
	    zend_hash_str_exists(EG(modified_ini_directives), "max_execution_time", sizeof("max_execution_time") - 1))
		timer.known = false;
}

/* Runs the request shutdown (or startup) of the extensions that keep per-request state PHP-FPM
 * would drop: the session (written and closed) and filter (filter_input()'s copies). */
static void modules_cycle(bool startup)
{
	static const char *const names[] = {"filter", "session"};
	static zend_module_entry *modules[2];
	static bool found;

	if (!found) { /* the registry does not change after startup: looked up once */
		for (size_t i = 0; i < sizeof(names) / sizeof(*names); i++)
			modules[i] = zend_hash_str_find_ptr(&module_registry, names[i], strlen(names[i]));
		found = true;
	}
	for (size_t i = 0; i < sizeof(names) / sizeof(*names); i++) {
		zend_module_entry *m = modules[i];
		if (m != NULL && startup && m->request_startup_func)
			m->request_startup_func(m->type, m->module_number);
		else if (m != NULL && !startup && m->request_shutdown_func)
			m->request_shutdown_func(m->type, m->module_number);
	}
}

/* $_SERVER's auto global, whose callback server_create() wraps to learn that it was wanted. */
static struct {
	zend_auto_global *global;
	bool (*create)(zend_string *name); /* PHP's php_auto_globals_create_server */
	bool wanted;                       /* something named or asked for $_SERVER: every request has it */
} server = {.wanted = true};

static bool server_create(zend_string *name)
{
	server.wanted = true;
	return server.create(name);
}

/* Called once the worker script's request has started, before its code is compiled. When
 * $_SERVER exists already (auto_globals_jit off, or OPcache pinged it for preloaded code at
 * request startup), every request has it. */
static void server_jit_install(void)
{
	zend_auto_global *g = zend_hash_str_find_ptr(CG(auto_globals), "_SERVER", sizeof("_SERVER") - 1);

	if (g == NULL || !g->armed)
		return;
	server.global = g;
	server.create = g->auto_global_callback;
	server.wanted = false;
	g->auto_global_callback = server_create;
}

/* Registers $_GET, $_POST (PHP reads the body here: forms, multipart uploads, their limits),
 * $_COOKIE, $_SERVER, $_FILES and $_REQUEST again, as php_hash_environment() does. */
static void register_globals(void)
{
	static const char *const names[] = {"_GET", "_POST", "_COOKIE", "_SERVER", "_FILES", "_REQUEST"};
	static zend_auto_global *globals[6];
	static bool found;
	zval *files = &PG(http_globals)[TRACK_VARS_FILES];

	if (!found) { /* registered at startup, for the process's life: looked up once */
		for (size_t i = 0; i < sizeof(names) / sizeof(*names); i++)
			globals[i] = zend_hash_str_find_ptr(CG(auto_globals), names[i], strlen(names[i]));
		found = true;
	}
	zval_ptr_dtor_nogc(files);
	ZVAL_UNDEF(files);
	for (size_t i = 0; i < sizeof(names) / sizeof(*names); i++) {
		zend_auto_global *g = globals[i];
		if (g != NULL && g == server.global && !server.wanted)
			continue; /* still armed: created on demand, not yet in the symbol table */
		if (g != NULL && g->auto_global_callback)
			g->armed = g->auto_global_callback(g->name);
	}
}

static void clear_last_error(void)
{
	if (PG(last_error_message)) {
		zend_string_release(PG(last_error_message));
		PG(last_error_message) = NULL;
	}
	if (PG(last_error_file)) {
		zend_string_release(PG(last_error_file));
		PG(last_error_file) = NULL;
	}
	PG(last_error_type) = 0;
	PG(last_error_lineno) = 0;
}

static void ini_save(void)
{
	zend_string *name;
	zend_ini_entry *entry;

	zend_hash_init(&saved.ini, 8, NULL, ZVAL_PTR_DTOR, 0);
	if (EG(modified_ini_directives) == NULL)
		return;
	ZEND_HASH_MAP_FOREACH_STR_KEY_PTR(EG(modified_ini_directives), name, entry) {
		zval v;
		if (entry->value)
			ZVAL_STR_COPY(&v, entry->value);
		else
			ZVAL_NULL(&v);
		zend_hash_add(&saved.ini, name, &v);
	} ZEND_HASH_FOREACH_END();
}

/* Puts back the ini settings the request changed: to their startup value, or to the value the
 * script had given them before the request. */
static void ini_restore(void)
{
	zend_string *name;
	zval *v;
	zend_ini_entry *entry;
	HashTable changed;

	zend_hash_init(&changed, 8, NULL, NULL, 0);
	if (EG(modified_ini_directives) != NULL) {
		ZEND_HASH_MAP_FOREACH_STR_KEY_PTR(EG(modified_ini_directives), name, entry) {
			zend_hash_add_empty_element(&changed, name);
		} ZEND_HASH_FOREACH_END();
	}
	ZEND_HASH_MAP_FOREACH_STR_KEY(&changed, name) {
		v = zend_hash_find(&saved.ini, name);
		entry = zend_hash_find_ptr(EG(ini_directives), name);
		if (v == NULL)
			zend_restore_ini_entry(name, ZEND_INI_STAGE_DEACTIVATE);
		else if (Z_TYPE_P(v) == IS_STRING && entry && (!entry->value || !zend_string_equals(entry->value, Z_STR_P(v))))
			zend_alter_ini_entry_ex(name, Z_STR_P(v), ZEND_INI_SYSTEM, ZEND_INI_STAGE_RUNTIME, 1);
	} ZEND_HASH_FOREACH_END();
	zend_hash_destroy(&changed);
	zend_hash_destroy(&saved.ini);
}

/* Handles what the handler (or a shutdown function) left in EG(exception): exit() ends the
 * request quietly; anything else is reported as FPM reports an uncaught exception (the user
 * exception handler first), which answers 500. */
static void settle_exception(void)
{
	if (EG(exception) == NULL)
		return;
	if (zend_is_unwind_exit(EG(exception)) || zend_is_graceful_exit(EG(exception))) {
		zend_clear_exception();
		return;
	}
	if (Z_TYPE(EG(user_exception_handler)) != IS_UNDEF)
		zend_user_exception_handler();
	if (EG(exception))
		zend_exception_error(EG(exception), E_ERROR);
}

static int call_shutdown_function(zval *zv)
{
	php_shutdown_function_entry *entry = Z_PTR_P(zv);
	zval retval;

	entry->fci.retval = &retval;
	zend_call_function(&entry->fci, &entry->fci_cache);
	zval_ptr_dtor(&retval);
	if (EG(exception)) { /* exit() or an uncaught exception: the rest do not run, as under FPM */
		settle_exception();
		return ZEND_HASH_APPLY_STOP;
	}
	return ZEND_HASH_APPLY_KEEP;
}

/* Ends the SAPI's request state (headers, uploaded files, POST data) and forgets the pointers
 * sapi_deactivate_module() frees without clearing them. */
static void sapi_reset(void)
{
	sapi_deactivate_module();
	sapi_deactivate_destroy();
	SG(request_info).content_type_dup = NULL;
	SG(request_info).auth_user = NULL;
	SG(request_info).auth_password = NULL;
	SG(request_info).auth_digest = NULL;
	SG(request_info).current_user = NULL;
}

/* Flushes what the script buffered to the log, sends READY once, and reads the next REQUEST. */
static bool wait_request(void)
{
	php_output_end_all();
	if (!saved.booted) { /* the boot's time limit; each request arms its own */
		zend_unset_timeout();
		timer.known = false;
	}
	pg_send_ready();
	return pg_next_request();
}

static void begin_request(void)
{
	if (!saved.booted) { /* the boot's session and filter state end here */
		modules_cycle(false);
		saved.booted = true;
	}
	sapi_reset();
	pg_request_info_fill();
	PG(during_request_startup) = 1; /* warnings about the body say "PHP Request Startup" */
	sapi_activate();
	PG(header_is_being_sent) = 0;
	PG(connection_status) = PHP_CONNECTION_NORMAL;
	OG(flags) &= ~(PHP_OUTPUT_DISABLED | PHP_OUTPUT_SENT);
	if (OG(output_start_filename)) {
		zend_string_release(OG(output_start_filename));
		OG(output_start_filename) = NULL;
	}
	OG(output_start_lineno) = 0;
	clear_last_error();
	EG(exit_status) = 0;
	if (PG(expose_php))
		sapi_add_header(SAPI_PHP_VERSION_HEADER, sizeof(SAPI_PHP_VERSION_HEADER) - 1, 1);
	if (PG(output_buffering))
		php_output_start_user(NULL, PG(output_buffering) > 1 ? PG(output_buffering) : 0,
				      PHP_OUTPUT_HANDLER_STDFLAGS);
	register_globals();
	PG(during_request_startup) = 0;
	modules_cycle(true);
	saved.shutdown_functions = BG(user_shutdown_function_names);
	BG(user_shutdown_function_names) = NULL;
	ini_save();
	arm_time_limit();
}

/* Calls the handler, then the shutdown functions it registered (after a fatal error too, as
 * php_request_shutdown() does). Returns false after a fatal error: the engine was unwound by a
 * bailout and may be unusable. */
static bool call_handler(zend_fcall_info *fci, zend_fcall_info_cache *fcc)
{
	zval retval;
	volatile bool ok = true;

	fci->retval = &retval;
	zend_try {
		if (zend_call_function(fci, fcc) == SUCCESS)
			zval_ptr_dtor(&retval);
		settle_exception();
	} zend_catch {
		ok = false;
	} zend_end_try();
	zend_try {
		if (BG(user_shutdown_function_names))
			zend_hash_apply(BG(user_shutdown_function_names), call_shutdown_function);
	} zend_catch {
		ok = false;
	} zend_end_try();
	php_free_shutdown_functions();
	BG(user_shutdown_function_names) = saved.shutdown_functions;
	/* Some bailouts are caught inside the engine and execution resumes; the flag remains. */
	return ok && !CG(unclean_shutdown);
}

/* Ends the request's output and sends the answer. After a fatal error the buffers are flushed
 * as php_request_shutdown() would (dropped if memory ran out). */
static void send_answer(bool ok)
{
	zend_try {
		if (!ok && PG(last_error_type) == E_ERROR && (size_t)PG(memory_limit) < zend_memory_usage(1))
			php_output_discard_all();
		else
			php_output_end_all();
		if (ok)
			modules_cycle(false); /* the session is written, as at FPM's request end */
		php_header();
	} zend_end_try();
	pg_request_end(!ok); /* after a fatal error the worker exits: it reads nothing more */
}

static void end_request(void)
{
	zend_hash_str_del(&EG(symbol_table), "_SESSION", sizeof("_SESSION") - 1);
	time_limit_end();
	if (SG(request_info).request_body) {
		php_stream_close(SG(request_info).request_body);
		SG(request_info).request_body = NULL;
	}
	sapi_reset(); /* deletes uploaded files still in the temp dir */
	ini_restore();
	pg_request_info_clear();
	pg_request_free();
	pg_discard_body();
	sapi_activate(); /* a blank state for the script until the next request */
	SG(sapi_headers).http_response_code = 200;
}

PHP_FUNCTION(peregrine_handle_request)
{
	zend_fcall_info fci;
	zend_fcall_info_cache fcc;

	ZEND_PARSE_PARAMETERS_START(1, 1)
		Z_PARAM_FUNC(fci, fcc)
	ZEND_PARSE_PARAMETERS_END();
	if (!pg.worker || pg.active) {
		zend_throw_error(NULL, "peregrine_handle_request() must be called by the worker script, outside a request");
		RETURN_THROWS();
	}
	if (pg.concurrency > 1) {
		/* PHP's request state is the process's: one request at a time (docs/concurrency.md). */
		zend_throw_error(NULL, "workers.concurrency is %d, but this worker serves one request at a time with "
				 "PHP's own request state (serveGlobals(), --laravel, --symfony): set workers.concurrency: 1, "
				 "or serve with Peregrine\\Worker's serve() or servePsr()", pg.concurrency);
		RETURN_THROWS();
	}
	if (!wait_request())
		RETURN_FALSE;
	begin_request();
	bool ok = call_handler(&fci, &fcc);
	send_answer(ok);
	if (!ok) { /* a fatal error may leave the engine unusable: answer, then end the worker */
		fprintf(stderr, "peregrine-php: fatal error in a request; the worker exits\n");
		pg_request_info_clear();
		zend_bailout();
	}
	end_request();
	RETURN_TRUE;
}

/* Runs the worker script as one long request. Its exit status is the process's. */
int pg_worker_run(int argc, char **argv)
{
	zend_file_handle fh;
	int status;

	if (access(argv[0], R_OK) != 0) {
		fprintf(stderr, "Could not open input file: %s\n", argv[0]);
		return 1;
	}
	pg.script = argv[0];
	const char *concurrency = getenv("PEREGRINE_CONCURRENCY");
	pg.concurrency = concurrency ? atoi(concurrency) : 1;
	SG(options) |= SAPI_OPTION_NO_CHDIR;
	SG(request_info).argc = argc;
	SG(request_info).argv = argv;
	SG(request_info).path_translated = argv[0];
	if (php_request_startup() == FAILURE)
		return 1;
	if (!PG(register_argc_argv)) /* the script's $argv and $argc, as the CLI always has them */
		php_build_argv(NULL, NULL);
	server_jit_install();
	zend_stream_init_filename(&fh, argv[0]);
	fh.primary_script = 1;
	php_execute_script(&fh);
	zend_destroy_file_handle(&fh);
	status = EG(exit_status);
	php_request_shutdown(NULL);
	pg_say_exit(); /* requests written after the last one it ended go to another worker */
	return status;
}
