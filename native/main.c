/* main.c: peregrine-php [--template] [-d name=value]... [SCRIPT [ARGS...]]
 *
 * With SCRIPT, worker mode (worker.c). Without, classic mode: every REQUEST frame is a full
 * PHP request (startup, SCRIPT_FILENAME, shutdown), PHP-FPM's shared-nothing model in a process
 * that stays warm. Requests arrive on fd 3, answers leave on fd 4 (docs/protocol.md). With
 * --template, the process starts PHP and then forks the workers the server asks for
 * (template.c); each goes on here as if it had been started with the same arguments. */
#include "peregrine.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include "main/php_main.h"
#include "main/php_output.h"
#include "Zend/zend_extensions.h"

#define REEXEC_ENV "PEREGRINE_PHP_OPCACHE_TRIED"

static void usage(void)
{
	fprintf(stderr, "usage: peregrine-php [--template] [-d name=value]... [SCRIPT [ARGS...]]\n"
			"Started by the peregrine server with requests on fd 3 and answers on fd 4,\n"
			"or with --template, its control socket on fd 3.\n");
	exit(64);
}

/* Runs one request in classic mode, as FPM's main loop does. path_translated is emalloc'ed:
 * php_fopen_primary_script() frees it when the script cannot be opened. Returns false when PHP
 * could not start the request: its state is half made, and the worker must end, as FPM's child
 * does. */
static bool classic_request(void)
{
	const char *script = pg_param("SCRIPT_FILENAME");
	zend_file_handle fh;

	SG(request_info).path_translated = script && *script ? estrdup(script) : NULL;
	if (php_request_startup() == FAILURE) {
		fprintf(stderr, "peregrine-php: PHP could not start the request; the worker exits\n");
		pg.req.status = 500;
		return false;
	}
	if (SG(request_info).path_translated == NULL) {
		zend_try {
			SG(sapi_headers).http_response_code = 404;
			PUTS("File not found.\n");
		} zend_end_try();
	} else {
		zend_stream_init_filename(&fh, SG(request_info).path_translated);
		fh.primary_script = 1;
		if (php_fopen_primary_script(&fh) == FAILURE) {
			zend_try {
				fprintf(stderr, "peregrine-php: unable to open primary script: %s (%s)\n", script, strerror(errno));
				SG(sapi_headers).http_response_code = errno == EACCES ? 403 : 404;
				PUTS(errno == EACCES ? "Access denied.\n" : "File not found.\n");
			} zend_end_try();
		} else {
			php_execute_script(&fh);
		}
		zend_destroy_file_handle(&fh);
	}
	if (SG(request_info).path_translated) {
		efree(SG(request_info).path_translated);
		SG(request_info).path_translated = NULL;
	}
	php_request_shutdown(NULL);
	return true;
}

static int classic_serve(void)
{
	pg_send_ready();
	while (pg_next_request()) {
		pg_request_info_fill();
		bool ok = classic_request();
		pg_request_end(!ok);
		pg_request_info_clear();
		pg_request_free();
		if (!ok)
			return 1;
	}
	return 0;
}

/* Serves requests: worker mode with a SCRIPT (argv[0]), classic mode without. */
static int serve(int argc, char **argv)
{
	/* Children PHP spawns (exec, proc_open) must not hold the server's pipes. */
	fcntl(3, F_SETFD, FD_CLOEXEC);
	fcntl(4, F_SETFD, FD_CLOEXEC);
	pg.out = pg_xmalloc(PG_BODY_CHUNK);
	pg.worker = argc > 0;
	pg.direct = pg.worker && pg_direct_init();
	return pg.worker ? pg_worker_run(argc, argv) : classic_serve();
}

/* Appends "name=value\n" (or "name=1\n") to the ini entries given to PHP. */
static void add_ini(smart_string *ini, const char *arg)
{
	smart_string_appendl_ex(ini, arg, strlen(arg), 1);
	if (strchr(arg, '=') == NULL)
		smart_string_appendl_ex(ini, "=1", 2, 1);
	smart_string_appendc_ex(ini, '\n', 1);
}

/* OPcache is a zend_extension loaded by an ini file; if none loaded it, start again once with
 * -d zend_extension=opcache.so (loading it twice would print a warning on every start). */
static void ensure_opcache(char **argv)
{
	if (zend_get_extension("Zend OPcache") != NULL || getenv(REEXEC_ENV) != NULL)
		return;
	int argc = 0;
	while (argv[argc])
		argc++;
	char **args = calloc((size_t)argc + 3, sizeof(char *));
	args[0] = argv[0];
	args[1] = "-dzend_extension=opcache.so";
	memcpy(args + 2, argv + 1, (size_t)argc * sizeof(char *));
	setenv(REEXEC_ENV, "1", 1);
	pg_engine_keep();
	execv("/proc/self/exe", args);
	fprintf(stderr, "peregrine-php: re-executing with OPcache: %s\n", strerror(errno));
	free(args);
}

/* A forked worker's command line is the template's: takes --template out of it, in place in the
 * memory /proc/PID/cmdline shows (the strings of argv are contiguous there), and out of argv, so
 * that ps tells the workers from their template. Returns the new argc. */
static int drop_template_flag(int argc, char **argv)
{
	const size_t len = sizeof("--template"); /* with its NUL */
	int k = 1;

	while (k < argc && strcmp(argv[k], "--template") != 0)
		k++;
	if (k == argc)
		return argc;
	char *end = argv[argc - 1] + strlen(argv[argc - 1]) + 1;
	memmove(argv[k], argv[k] + len, (size_t)(end - (argv[k] + len)));
	memset(end - len, 0, len);
	for (int j = k; j < argc - 1; j++)
		argv[j] = argv[j + 1] - len;
	argv[argc - 1] = NULL;
	return argc - 1;
}

int main(int argc, char **argv)
{
	smart_string ini = {0};
	bool template = false;
	int i, status;

#ifndef PG_ENGINE
	pg_engine_exec(argv); /* returns when PEREGRINE_PHP_ENGINE is unset or unusable */
#endif
	for (i = 1; i < argc && argv[i][0] == '-'; i++) {
		if (strcmp(argv[i], "--template") == 0)
			template = true;
		else if (strcmp(argv[i], "-d") == 0 && i + 1 < argc)
			add_ini(&ini, argv[++i]);
		else if (strncmp(argv[i], "-d", 2) == 0 && argv[i][2] != '\0')
			add_ini(&ini, argv[i] + 2);
		else
			usage();
	}
	if (template && fcntl(3, F_GETFD) < 0) {
		fprintf(stderr, "peregrine-php: --template: fd 3 must be the control socket: the peregrine server starts this program\n");
		exit(64);
	} else if (!template && (fcntl(3, F_GETFD) < 0 || fcntl(4, F_GETFD) < 0)) {
		fprintf(stderr, "peregrine-php: fds 3 and 4 must be open: the peregrine server starts this program\n");
		exit(64);
	}
	if (template)
		pg_template_reserve_fds();
	smart_string_0(&ini);

	signal(SIGPIPE, SIG_IGN);
	zend_signal_startup();
	sapi_startup(&pg_sapi);
	pg_sapi.ini_entries = ini.c;
	pg_sapi.additional_functions = pg_functions;
	pg_sapi.executable_location = argv[0];
	if (pg_sapi.startup(&pg_sapi) == FAILURE) {
		fprintf(stderr, "peregrine-php: PHP failed to start\n");
		return 1;
	}
	if (!pg_engine_matches())
		return 70;
	ensure_opcache(argv);
	if (template && !pg_template_serve()) {
		status = 0; /* the template, at the end of its control socket */
	} else { /* a worker, started by exec or forked by the template */
		if (template) {
			argc = drop_template_flag(argc, argv);
			i--;
		}
		status = serve(argc - i, argv + i);
	}
	php_module_shutdown();
	sapi_shutdown();
	free(pg.out);
	smart_string_free_ex(&ini, 1);
	return status;
}
