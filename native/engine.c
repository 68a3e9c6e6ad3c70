/* engine.c: PEREGRINE_PHP_ENGINE, the native runtime run inside a PHP executable.
 *
 * bin/peregrine-php runs PHP from Debian's libphp8.2.so, which is compiled as position-independent
 * library code: each access to an engine global (EG, CG, ...) loads its address from the GOT and
 * calls between the engine's own functions go through the PLT. The same engine compiled into an
 * executable (/usr/sbin/php-fpm8.2, /usr/bin/php8.2) addresses them directly. The instructions are
 * the same in number; the library's extra loads and indirect jumps cost 15-17% of the CPU of
 * CPU-bound PHP and a few percent of a WordPress or MediaWiki page (docs/classic-mode.md).
 *
 * With PEREGRINE_PHP_ENGINE set to such an executable (by default in classic mode, PHP-FPM's, when
 * it is installed), bin/peregrine-php runs the same code inside it instead: it executes the engine with bin/peregrine-php-engine.so (this runtime built as a
 * shared object without libphp, PG_ENGINE defined) preloaded. The preloaded object starts before
 * the executable's main(), which never runs: it calls this runtime's main() instead, against the
 * executable's engine. PHP then reads the executable's php.ini (/etc/php/8.2/fpm/php.ini for FPM).
 * It must be the PHP release this runtime was built for; the engine refuses another at start.
 * Not under valgrind, which follows no such exec: there it stays on libphp. */
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if defined(__has_include)
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#endif
#endif
#ifndef RUNNING_ON_VALGRIND
#define RUNNING_ON_VALGRIND 0
#endif

#define ENGINE_ENV "PEREGRINE_PHP_ENGINE"

#ifndef PG_ENGINE

#include "main/php_version.h"

void pg_engine_exec(char **argv);

#define STR_(x) #x
#define STR(x) STR_(x)
/* PHP-FPM's executable of the PHP release this runtime is built for: classic mode's engine. */
#define FPM_ENGINE "/usr/sbin/php-fpm" STR(PHP_MAJOR_VERSION) "." STR(PHP_MINOR_VERSION)

/* Whether argv is classic mode's: options (-d, --template) and no SCRIPT. */
static bool classic_mode(char **argv)
{
	for (int i = 1; argv[i] != NULL; i++) {
		if (strcmp(argv[i], "-d") == 0 && argv[i + 1] != NULL)
			i++;
		else if (argv[i][0] != '-')
			return false;
	}
	return true;
}

/* Executes the engine with bin/peregrine-php-engine.so preloaded: PEREGRINE_PHP_ENGINE, or in
 * classic mode, when that is unset, PHP-FPM's executable if it is installed (classic mode runs
 * what FPM runs). Returns, the runtime going on with libphp, when there is none, when
 * PEREGRINE_PHP_ENGINE is empty, or when it cannot be executed (said on stderr when it was set). */
void pg_engine_exec(char **argv)
{
	const char *engine = getenv(ENGINE_ENV);
	bool chosen = engine != NULL;
	char self[PATH_MAX], preload[PATH_MAX + 16];
	ssize_t n;

	if (!chosen && classic_mode(argv) && access(FPM_ENGINE, X_OK) == 0)
		engine = FPM_ENGINE;
	if (engine == NULL || *engine == '\0' || RUNNING_ON_VALGRIND)
		return;
	if ((n = readlink("/proc/self/exe", self, sizeof(self) - 1)) <= 0)
		return;
	self[n] = '\0';
	snprintf(preload, sizeof(preload), "%s-engine.so", self);
	if (access(preload, R_OK) != 0 || (getenv("LD_PRELOAD") != NULL && *getenv("LD_PRELOAD") != '\0')) {
		if (chosen)
			fprintf(stderr, "peregrine-php: %s=%s, but %s: running PHP from libphp\n", ENGINE_ENV, engine,
				access(preload, R_OK) != 0 ? "bin/peregrine-php-engine.so is missing" : "LD_PRELOAD is set");
		return;
	}
	setenv("LD_PRELOAD", preload, 1);
	execv(engine, argv);
	if (chosen)
		fprintf(stderr, "peregrine-php: %s=%s: %s: running PHP from libphp\n", ENGINE_ENV, engine, strerror(errno));
	unsetenv("LD_PRELOAD");
}

void pg_engine_keep(void)
{
}

bool pg_engine_matches(void)
{
	return true;
}

#else /* PG_ENGINE: bin/peregrine-php-engine.so, preloaded into the engine */

#include <dlfcn.h>
#include <sys/prctl.h>

#include "php.h"

int pg_main(int argc, char **argv); /* main.c's main(), renamed by the build */
void pg_engine_keep(void);
bool pg_engine_matches(void);

typedef int (*main_fn)(int, char **, char **);
typedef int (*libc_start_fn)(main_fn, int, char **, void (*)(void), void (*)(void), void (*)(void), void *);

static int start(int argc, char **argv, char **envp)
{
	(void)envp;
	unsetenv("LD_PRELOAD"); /* not for the programs PHP runs */
	prctl(PR_SET_NAME, basename(argv[0])); /* ps and top name it peregrine-php, not the engine */
	if (dlsym(RTLD_DEFAULT, "php_module_startup") == NULL) {
		fprintf(stderr, "peregrine-php: %s=%s is not a PHP executable\n", ENGINE_ENV, getenv(ENGINE_ENV) ? getenv(ENGINE_ENV) : "");
		return 70;
	}
	return pg_main(argc, argv);
}

/* After PHP's startup: whether the engine is the PHP release (major.minor) this object was built
 * for, whose structures it shares. */
bool pg_engine_matches(void)
{
	const char *v = zend_get_module_version("standard");
	const char *want = PHP_VERSION;
	size_t len = (size_t)(strchr(strchr(want, '.') + 1, '.') - want) + 1; /* "8.2." */

	if (v != NULL && strncmp(v, want, len) == 0)
		return true;
	fprintf(stderr, "peregrine-php: %s runs PHP %s; bin/peregrine-php-engine.so was built for PHP %.*s\n", ENGINE_ENV,
		v ? v : "(unknown)", (int)len - 1, want);
	return false;
}

/* The C library calls main() from here; the executable's main() is replaced by the runtime's. */
int __libc_start_main(main_fn main, int argc, char **argv, void (*init)(void), void (*fini)(void),
		      void (*rtld_fini)(void), void *stack_end)
{
	libc_start_fn real = (libc_start_fn)dlsym(RTLD_NEXT, "__libc_start_main");

	(void)main;
	return real(start, argc, argv, init, fini, rtld_fini, stack_end);
}

/* Before the runtime executes its own executable again (main.c, ensure_opcache): preloads this
 * object again, or the engine's own main() would run. */
void pg_engine_keep(void)
{
	Dl_info info;

	if (dladdr((void *)pg_engine_keep, &info) != 0 && info.dli_fname != NULL)
		setenv("LD_PRELOAD", info.dli_fname, 1);
}

#endif
