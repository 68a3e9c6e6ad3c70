/* sapi.c: the SAPI module: one short function per callback, over the request in `pg`. */
#include "peregrine.h"

#include <dlfcn.h>
#include <strings.h>
#include <unistd.h>

#include "ext/filter/php_filter.h"
#include "ext/standard/head.h"
#include "main/php_ini.h"
#include "main/php_main.h"
#include "main/php_output.h"
#include "main/php_variables.h"
#include "table.h"

struct pg_runtime pg;

/* The last value of a server variable of the current request, or NULL. */
const char *pg_param(const char *name)
{
	size_t len = strlen(name);

	pg_request_vars();
	for (size_t i = pg.req.nvars; i-- > 0;)
		if (pg.req.vars[i].name_len == len && memcmp(pg.req.vars[i].name, name, len) == 0)
			return pg.req.vars[i].value;
	return NULL;
}

/* Whether the current request hit a fatal error (an uncaught exception included). */
bool pg_fatal_error(void)
{
	return PG(last_error_message) != NULL &&
	       (PG(last_error_type) & (E_ERROR | E_CORE_ERROR | E_COMPILE_ERROR | E_USER_ERROR |
				       E_PARSE | E_RECOVERABLE_ERROR));
}

/* Fills SG(request_info) from the current request, as FPM's init_request_info does. */
void pg_request_info_fill(void)
{
	const struct pg_head *h = &pg.req.head;
	const char *auth = NULL;

	for (size_t i = 0; i < h->nheaders && auth == NULL; i++)
		if (strcmp(h->headers[i].name, "authorization") == 0)
			auth = h->headers[i].value;
	SG(request_info).request_method = h->field[PG_METHOD];
	SG(request_info).query_string = (char *)h->field[PG_QUERY];
	SG(request_info).request_uri = (char *)pg.req.php_self;
	SG(request_info).content_type = pg.req.content_type;
	SG(request_info).content_length = (zend_long)pg.req.body_left;
	SG(request_info).path_translated = NULL; /* classic mode sets its own copy */
	SG(request_info).argc = 0;
	SG(request_info).argv = NULL;
	SG(sapi_headers).http_response_code = 200;
	php_handle_auth_data(auth);
	SG(server_context) = &pg;
	pg.active = true;
}

/* Forgets the pointers into the request's buffers before they are freed. */
void pg_request_info_clear(void)
{
	pg.active = false;
	SG(server_context) = NULL;
	SG(request_info).request_method = NULL;
	SG(request_info).query_string = NULL;
	SG(request_info).request_uri = NULL;
	SG(request_info).content_type = NULL;
	SG(request_info).path_translated = NULL;
	SG(request_info).cookie_data = NULL;
}

/* PHP's own import of the process environment, which pg_startup replaces for getenv(). */
static void (*import_process_environment)(zval *arr);

/* getenv() without a name, as under FPM (whose import is cgi_php_import_environment_variables):
 * the process environment, then the request's variables. */
static void import_with_request(zval *arr)
{
	import_process_environment(arr);
	if (pg.active)
		pg_request_vars();
	for (size_t i = 0; pg.active && i < pg.req.nvars; i++)
		add_assoc_stringl_ex(arr, pg.req.vars[i].name, pg.req.vars[i].name_len, (char *)pg.req.vars[i].value,
				     pg.req.vars[i].value_len);
}

static int pg_startup(sapi_module_struct *module)
{
	import_process_environment = php_import_environment_variables;
	php_import_environment_variables = import_with_request;
	return php_module_startup(module, &pg_table_module); /* table.c: Peregrine\Table */
}

/* Registers one of the CLI's stream constants (STDIN, STDOUT, STDERR) for path ("php://stdin"). */
static void define_stream_constant(const char *name, const char *path, const char *mode)
{
	php_stream *stream = php_stream_open_wrapper_ex(path, mode, 0, NULL, NULL);
	zend_constant c;

	if (stream == NULL)
		return;
	php_stream_to_zval(stream, &c.value);
	ZEND_CONSTANT_SET_FLAGS(&c, CONST_CS, 0);
	c.name = zend_string_init_interned(name, strlen(name), 0);
	zend_register_constant(&c);
}

/* Worker mode defines STDIN, STDOUT and STDERR as the CLI does, once, when the worker script's
 * long request starts, so scripts written for the cli runtime or RoadRunner run unchanged.
 * STDOUT and STDERR are the server's log, never the client. Classic mode stays as FPM: undefined. */
static void define_stdio(void)
{
	static bool defined;

	if (!pg.worker || pg.active || defined)
		return;
	defined = true;
	define_stream_constant("STDIN", "php://stdin", "rb");
	define_stream_constant("STDOUT", "php://stdout", "wb");
	define_stream_constant("STDERR", "php://stderr", "wb");
}

/* The settings of the user ini files (user_ini.filename, ".user.ini") that apply to one
 * directory, read at most every user_ini.cache_ttl seconds: FPM's user_config_cache entry. */
struct user_ini {
	time_t expires;
	HashTable config;
};

/* The script's directory, with its trailing slash => struct user_ini; for the process's life. */
static HashTable user_ini_cache;

static void user_ini_free(zval *zv)
{
	struct user_ini *u = Z_PTR_P(zv);

	zend_hash_destroy(&u->config);
	free(u);
}

/* Reads the user ini files for the directory path (writable, ending in a slash) into config,
 * as FPM's php_cgi_ini_activate_user_config() does: inside the document root, those of every
 * directory from the root down to path; elsewhere, path's own. */
static void user_ini_read(HashTable *config, char *path, size_t path_len, const char *doc_root, size_t doc_root_len)
{
	if (path_len > doc_root_len && strncmp(path, doc_root, doc_root_len) == 0) {
		for (char *p = path + doc_root_len; (p = strchr(p, '/')) != NULL; p++) {
			*p = '\0';
			php_parse_user_ini_file(path, PG(user_ini_filename), config);
			*p = '/';
		}
	} else if (path_len > doc_root_len || strncmp(path, doc_root, path_len) != 0) {
		php_parse_user_ini_file(path, PG(user_ini_filename), config);
	}
}

/* Activates the user ini files' settings for the directory path (the cache key), reading
 * them again once the cached copy has expired. */
static void user_ini_activate(char *path, size_t path_len, const char *doc_root, size_t doc_root_len)
{
	static bool ready;
	time_t now = (time_t)sapi_get_request_time();
	struct user_ini *u;

	if (!ready) {
		zend_hash_init(&user_ini_cache, 8, NULL, user_ini_free, 1);
		ready = true;
	}
	u = zend_hash_str_find_ptr(&user_ini_cache, path, path_len);
	if (u == NULL) {
		u = pg_xmalloc(sizeof(*u));
		u->expires = 0;
		zend_hash_init(&u->config, 0, NULL, config_zval_dtor, 1);
		zend_hash_str_update_ptr(&user_ini_cache, path, path_len, u);
	}
	if (now > u->expires) {
		char *real = NULL;
		zend_hash_clean(&u->config);
		if (!IS_ABSOLUTE_PATH(path, path_len)) {
			if ((real = tsrm_realpath(path, NULL)) == NULL)
				return;
			path = real;
			path_len = strlen(real);
		}
		user_ini_read(&u->config, path, path_len, doc_root, doc_root_len);
		if (real != NULL)
			efree(real);
		u->expires = now + PG(user_ini_cache_ttl);
	}
	php_ini_activate_config(&u->config, PHP_INI_PERDIR, PHP_INI_STAGE_HTACCESS);
}

/* Classic mode applies what FPM's activate callback applies before the script runs: php.ini's
 * [HOST=] and [PATH=] sections, and the user ini files (.user.ini) from DOCUMENT_ROOT down to
 * the script's directory. Worker mode, a process serving one script, has none. */
static void activate_dir_config(void)
{
	const char *script = SG(request_info).path_translated;

	if (pg.worker || !pg.active || script == NULL)
		return; /* before pg_param(): sapi_activate() runs twice a worker-mode request */
	const char *host = pg_param("SERVER_NAME"), *doc_root = pg_param("DOCUMENT_ROOT");
	bool user_ini = PG(user_ini_filename) && *PG(user_ini_filename);
	if (php_ini_has_per_host_config() && host != NULL) {
		char *lower = estrdup(host);
		zend_str_tolower(lower, strlen(lower));
		php_ini_activate_per_host_config(lower, strlen(lower));
		efree(lower);
	}
	if (!php_ini_has_per_dir_config() && !user_ini)
		return;
	size_t len = strlen(script);
	char *path = emalloc(len + 2);
	memcpy(path, script, len + 1);
	len = zend_dirname(path, len);
	path[len++] = '/';
	path[len] = '\0';
	php_ini_activate_per_dir_config(path, len);
	if (user_ini && doc_root != NULL) {
		size_t root_len = strlen(doc_root);
		if (root_len > 0 && doc_root[root_len - 1] == '/')
			root_len--;
		user_ini_activate(path, len, doc_root, root_len);
	}
	efree(path);
}

/* HTTP/1.0 whatever the request's protocol, as FPM's init_request_info() sets it: PHP's
 * header("Location: ...") then answers 302 after a POST, where proto_num > 1000 would make it 303. */
static int pg_activate(void)
{
	SG(request_info).proto_num = 1000;
	define_stdio();
	activate_dir_config();
	return SUCCESS;
}

static size_t pg_ub_write(const char *str, size_t len)
{
	size_t done = 0;

	if (!pg.active) { /* the worker's own output, outside any request: the log */
		while (done < len) {
			ssize_t w = write(STDOUT_FILENO, str + done, len - done);
			if (w <= 0)
				break;
			done += (size_t)w;
		}
		return len;
	}
	if (pg.req.finished)
		return len;
	while (done < len) {
		size_t n = MIN(len - done, PG_BODY_CHUNK - pg.out_len);
		memcpy(pg.out + pg.out_len, str + done, n);
		pg.out_len += n;
		done += n;
		if (pg.out_len == PG_BODY_CHUNK)
			pg_emit(PG_FLAG_MORE);
	}
	return len;
}

/* flush(): what was output so far goes to the client now. */
static void pg_flush(void *server_context)
{
	(void)server_context;
	if (!pg.active || pg.req.finished)
		return;
	if (!SG(headers_sent))
		sapi_send_headers();
	if (pg.out_len > 0 || !pg.req.started)
		pg_emit(PG_FLAG_MORE | PG_FLAG_FLUSH);
}

/* getenv() sees the request's variables first, as under FPM. */
static char *pg_getenv(const char *name, size_t len)
{
	(void)len;
	return pg.active ? (char *)pg_param(name) : NULL;
}

/* Appends "name\0value\0" to *buf; a "Status:" header sets *status instead, as FPM does. */
static void append_header(smart_string *buf, const sapi_header_struct *h, int *status)
{
	const char *colon = memchr(h->header, ':', h->header_len);
	const char *value;

	if (colon == NULL)
		return;
	for (value = colon + 1; *value == ' ' || *value == '\t'; value++)
		;
	size_t name_len = (size_t)(colon - h->header);
	if (name_len == 6 && strncasecmp(h->header, "Status", 6) == 0) {
		int code = atoi(value);
		if (code >= 100 && code <= 999)
			*status = code;
		return;
	}
	smart_string_appendl(buf, h->header, name_len);
	smart_string_appendc(buf, '\0');
	smart_string_appendl(buf, value, h->header_len - (size_t)(value - h->header));
	smart_string_appendc(buf, '\0');
}

/* Answers 502 with no header and no body, now, for a status the answer cannot carry: PHP lets
 * http_response_code() set any int (1000, 65736, -1), or a 1xx, which cannot end an answer,
 * and nginx answers 502 when FPM passes such a status on. The script goes on, its output
 * discarded, as after fastcgi_finish_request(). */
static void answer_bad_status(int status)
{
	fprintf(stderr, "peregrine-php: the script set the HTTP status %d, %s: answering 502\n", status,
		status >= 100 && status < 200 ? "a 1xx, which cannot end an answer" : "outside 100..999");
	free(pg.req.resp_head);
	pg.req.resp_head = NULL;
	pg.req.resp_head_len = 0;
	pg.req.status = 502;
	pg.req.captured = true;
	pg.out_len = 0;
	pg_answer_finish();
}

/* The header of an answer to a job a fatal error ended (php/src/Internal/JobConsumer.php):
 * its message, which the server keeps as the job's error. */
#define JOB_ERROR_HEADER "x-peregrine-job-error"
#define JOB_ERROR_MAX 1024

/* Adds the fatal error's message to the head of an answer to a JOB request, as JobConsumer's
 * shutdown function would: after memory ran out that PHP code cannot run (it needs memory),
 * and the job's error said only that a fatal error ended it. The message is built here, in
 * the head's buffer, as the head itself is. */
static void append_job_error(smart_string *buf)
{
	const struct pg_head *h = &pg.req.head;
	char msg[JOB_ERROR_MAX];
	int n;

	if (h->field[PG_METHOD] == NULL || h->field_len[PG_METHOD] != 3 || memcmp(h->field[PG_METHOD], "JOB", 3) != 0)
		return;
	n = snprintf(msg, sizeof msg, "PHP Fatal error: %s in %s:%d", ZSTR_VAL(PG(last_error_message)),
		     PG(last_error_file) ? ZSTR_VAL(PG(last_error_file)) : "Unknown", PG(last_error_lineno));
	if (n < 0)
		return;
	n = n < (int)sizeof msg ? n : (int)sizeof msg - 1;
	for (int i = 0; i < n; i++)
		if (msg[i] == '\r' || msg[i] == '\n' || msg[i] == '\0')
			msg[i] = ' ';
	smart_string_appendl(buf, JOB_ERROR_HEADER, sizeof JOB_ERROR_HEADER - 1);
	smart_string_appendc(buf, '\0');
	smart_string_appendl(buf, msg, (size_t)n);
	smart_string_appendc(buf, '\0');
}

/* Set while headers_send() sends a 1xx: only then is a 1xx status a HINTS frame. */
static bool pg_sending_hints;

/* Collects the head of the answer; it goes out with the first part of the body. A 1xx status
 * sent by headers_send(103) goes out at once as a HINTS frame; one still set when the answer
 * starts (http_response_code(150) and output) is a 502, as under nginx + PHP-FPM. */
static int pg_send_headers(sapi_headers_struct *headers)
{
	zend_llist_position pos;
	smart_string buf = {0};
	int status = headers->http_response_code ? headers->http_response_code : 200;

	if (!pg.active || pg.req.finished || pg.req.started)
		return SAPI_HEADER_SENT_SUCCESSFULLY;
	bool job_error = false;
	for (sapi_header_struct *h = zend_llist_get_first_ex(&headers->headers, &pos); h != NULL;
	     h = zend_llist_get_next_ex(&headers->headers, &pos)) {
		append_header(&buf, h, &status);
		if (h->header_len > sizeof JOB_ERROR_HEADER && h->header[sizeof JOB_ERROR_HEADER - 1] == ':' &&
		    strncasecmp(h->header, JOB_ERROR_HEADER, sizeof JOB_ERROR_HEADER - 1) == 0)
			job_error = true;
	}
	if (!job_error && pg_fatal_error())
		append_job_error(&buf);
	if (status >= 100 && status < 200 && pg_sending_hints) {
		pg_send_hints(buf.c, buf.len ? buf.len - 1 : 0);
		smart_string_free(&buf);
		return SAPI_HEADER_SENT_SUCCESSFULLY;
	}
	if (status < 200 || status > 999) {
		smart_string_free(&buf);
		answer_bad_status(status);
		return SAPI_HEADER_SENT_SUCCESSFULLY;
	}
	if (status == 200 && pg_fatal_error())
		status = 500;
	free(pg.req.resp_head);
	pg.req.resp_head_len = buf.len ? buf.len - 1 : 0; /* pairs are joined, not terminated */
	pg.req.resp_head = pg_xmalloc(buf.len + 1);
	memcpy(pg.req.resp_head, buf.c ? buf.c : "", buf.len);
	smart_string_free(&buf);
	pg.req.status = status;
	pg.req.captured = true;
	return SAPI_HEADER_SENT_SUCCESSFULLY;
}

static size_t pg_read_post(char *buf, size_t count)
{
	return pg.active ? pg_read_body(buf, count) : 0;
}

static char *pg_read_cookies(void)
{
	return pg.active ? (char *)pg.req.cookie : NULL;
}

static void pg_register(const char *name, const char *value, size_t len, zval *arr)
{
	size_t new_len = len;

	if (sapi_module.input_filter(PARSE_SERVER, name, (char **)&value, len, &new_len))
		php_register_variable_safe(name, value, new_len, arr);
}

/* Registering a request's variables through sapi_module.input_filter and
 * php_register_variable_safe() was about 40% of a PSR-7 hello request's instructions: per
 * variable the name copied and mangled twice (the filter extension's raw copy, then $_SERVER),
 * two values and two keys allocated and hashed. When the filter is known to change nothing,
 * register_plain() puts the same entries in the same two arrays itself: no filter (PHP's
 * default input filter), or the filter extension with filter.default unsafe_raw, whose
 * php_sapi_filter() then stores the value as given in $_SERVER and in its raw copy (what
 * filter_input(INPUT_SERVER) reads). Any other filter (filter.default set, another extension's
 * hook) goes through pg_register() as before. */
#ifndef FILTER_UNSAFE_RAW
#define FILTER_UNSAFE_RAW 0x0204 /* ext/filter/filter_private.h, not installed */
#endif

static struct {
	bool looked;
	/* the filter extension's input filter and its globals; NULL when it is not loaded */
	unsigned int (*filter)(int arg, const char *var, char **val, size_t val_len, size_t *new_val_len);
	zend_filter_globals *globals;
	HashTable keys; /* name => its key, for the names requests repeat */
	zend_string *last[64]; /* the kept key of each position's name in the last request */
} plain;

/* Keys kept for the process's life, as PHP keeps its own known strings: interned, so arrays
 * neither count nor free them. Client-chosen header names are kept up to this many. */
#define PLAIN_KEYS_MAX 512

static void plain_look(void)
{
#ifndef ZTS
	zend_module_entry *m = zend_hash_str_find_ptr(&module_registry, "filter", sizeof("filter") - 1);
	zend_ini_entry *ini = zend_hash_str_find_ptr(EG(ini_directives), "filter.default", sizeof("filter.default") - 1);
	void *core = dlsym(RTLD_DEFAULT, "php_register_variable_ex");
	Dl_info fi, ci;

	/* The extension's globals are not exported; its filter.default setting, a
	 * STD_PHP_INI_ENTRY, holds their address and the offset of default_filter in them. The
	 * filter extension is the one input filter PHP itself installs: a filter other than the
	 * default that lives in PHP's own binary (libphp or the FPM executable) is its
	 * php_sapi_filter(). */
	if (m != NULL && ini != NULL && ini->module_number == m->module_number && ini->mh_arg2 != NULL &&
	    (size_t)ini->mh_arg1 == offsetof(zend_filter_globals, default_filter) && core != NULL &&
	    sapi_module.input_filter != php_default_input_filter &&
	    dladdr((void *)sapi_module.input_filter, &fi) && dladdr(core, &ci) && fi.dli_fbase == ci.dli_fbase) {
		plain.filter = sapi_module.input_filter;
		plain.globals = ini->mh_arg2;
	}
#endif
	zend_hash_init(&plain.keys, 64, NULL, NULL, 1);
	plain.looked = true;
}

/* Whether name is registered as itself by php_register_variable_ex(): no leading space, no
 * space, dot or bracket to mangle, not numeric (a leading digit or minus sign). */
static bool plain_name(const char *name, size_t len)
{
	if (len == 0 || (name[0] >= '0' && name[0] <= '9') || name[0] == '-')
		return false;
	for (size_t i = 0; i < len; i++)
		if (name[i] == ' ' || name[i] == '.' || name[i] == '[')
			return false;
	return true;
}

/* The key for a plain name: the kept one, or a new one the caller releases. */
static zend_string *plain_key(const char *name, size_t len)
{
	zend_string *k = zend_hash_str_find_ptr(&plain.keys, name, len);

	if (k != NULL)
		return k;
	if (zend_hash_num_elements(&plain.keys) >= PLAIN_KEYS_MAX)
		return zend_string_init(name, len, 0);
	k = zend_string_init(name, len, 1);
	ZSTR_H(k) = zend_inline_hash_func(name, len);
	GC_SET_REFCOUNT(k, 1);
	GC_TYPE_INFO(k) = GC_STRING | ((IS_STR_INTERNED | IS_STR_PERSISTENT | IS_STR_PERMANENT) << GC_FLAGS_SHIFT);
	zend_hash_add_new_ptr(&plain.keys, k, k);
	return k;
}

/* The array the filter's raw copies go in (NULL: no copies), or false when the variables
 * must go through the input filter. */
static bool plain_target(HashTable **raw, uint32_t n)
{
	if (!plain.looked)
		plain_look();
	*raw = NULL;
	if (sapi_module.input_filter == php_default_input_filter)
		return true;
#ifndef ZTS
	if (plain.filter == NULL || sapi_module.input_filter != plain.filter ||
	    plain.globals->default_filter != FILTER_UNSAFE_RAW)
		return false;
	zval *a = &plain.globals->server_array;
	if (Z_TYPE_P(a) == IS_UNDEF)
		array_init_size(a, n);
	if (Z_TYPE_P(a) != IS_ARRAY)
		return false;
	*raw = Z_ARRVAL_P(a);
	return true;
#else
	(void)n;
	return false;
#endif
}

/* Registers the request's variables and PHP_SELF in arr ($_SERVER) as pg_register() would. */
static void register_plain(zval *arr)
{
	size_t n = pg.req.nvars + 1, kept = sizeof(plain.last) / sizeof(*plain.last);
	HashTable *raw, *ht;

	if (!plain_target(&raw, (uint32_t)n)) {
		for (size_t i = 0; i < pg.req.nvars; i++)
			pg_register(pg.req.vars[i].name, pg.req.vars[i].value, pg.req.vars[i].value_len, arr);
		pg_register("PHP_SELF", pg.req.php_self, strlen(pg.req.php_self), arr);
		return;
	}
	SEPARATE_ARRAY(arr);
	ht = Z_ARRVAL_P(arr);
	if (!HT_IS_PACKED(ht)) /* sized once: + REQUEST_TIME and REQUEST_TIME_FLOAT, which PHP adds */
		zend_hash_extend(ht, zend_hash_num_elements(ht) + (uint32_t)n + 2, 0);
	for (size_t i = 0; i < n; i++) {
		const struct pg_pair *v = i < pg.req.nvars ? &pg.req.vars[i] : NULL;
		const char *name = v ? v->name : "PHP_SELF", *value = v ? v->value : pg.req.php_self;
		size_t name_len = v ? v->name_len : sizeof("PHP_SELF") - 1, len = v ? v->value_len : strlen(value);
		zend_string *key = i < kept ? plain.last[i] : NULL;
		zval zv;

		/* Requests mostly repeat the last one's names in the same order: a kept key whose
		 * name is this one needs neither the checks nor a lookup. */
		if (key == NULL || ZSTR_LEN(key) != name_len || memcmp(ZSTR_VAL(key), name, name_len) != 0) {
			if (!plain_name(name, name_len)) {
				pg_register(name, value, len, arr);
				continue;
			}
			key = plain_key(name, name_len);
			if (i < kept && ZSTR_IS_INTERNED(key))
				plain.last[i] = key;
		}
		/* One string for both arrays: the filter's copy is the value as given. */
		ZVAL_STR(&zv, len == 0 ? ZSTR_EMPTY_ALLOC() : zend_string_init(value, len, 0));
		if (raw != NULL) {
			Z_TRY_ADDREF(zv);
			zend_hash_update_ind(raw, key, &zv);
		}
		zend_hash_update_ind(ht, key, &zv);
		zend_string_release(key);
	}
}

extern char **environ;

/* The environment as $_SERVER has it, imported once in worker mode: importing every variable
 * again for each request costs more than copying the array. It is imported again when the
 * environment changed (putenv() replaces an entry of environ, or environ itself). It lives in
 * the worker script's long request, whose end frees it. */
static struct {
	HashTable *vars;
	char **environ; /* environ when vars was imported */
	char **entries; /* a copy of its pointers, NULL-terminated */
} env_cache;

static bool env_unchanged(void)
{
	if (env_cache.vars == NULL || environ != env_cache.environ)
		return false;
	if (environ == NULL)
		return true;
	for (size_t i = 0;; i++) {
		if (environ[i] != env_cache.entries[i])
			return false;
		if (environ[i] == NULL)
			return true;
	}
}

static void import_environment(zval *arr)
{
	if (!pg.worker || !pg.active) {
		import_process_environment(arr);
		return;
	}
	if (!env_unchanged()) {
		zval vars;
		size_t n = 0;

		if (env_cache.vars != NULL)
			zend_array_release(env_cache.vars);
		array_init(&vars);
		import_process_environment(&vars);
		env_cache.vars = Z_ARRVAL(vars);
		while (environ != NULL && environ[n] != NULL)
			n++;
		free(env_cache.entries);
		env_cache.entries = pg_xmalloc((n + 1) * sizeof(char *));
		if (environ != NULL)
			memcpy(env_cache.entries, environ, (n + 1) * sizeof(char *));
		env_cache.environ = environ;
	}
	zval_ptr_dtor_nogc(arr);
	ZVAL_ARR(arr, zend_array_dup(env_cache.vars));
}

/* $_SERVER: the environment, then the request's variables (FPM imports the environment too);
 * outside a request (the worker script's boot), what the CLI registers. */
static void pg_register_variables(zval *arr)
{
	import_environment(arr);
	if (!pg.active) {
		const char *s = pg.script ? pg.script : "";
		pg_register("PHP_SELF", s, strlen(s), arr);
		pg_register("SCRIPT_NAME", s, strlen(s), arr);
		pg_register("SCRIPT_FILENAME", s, strlen(s), arr);
		pg_register("PATH_TRANSLATED", s, strlen(s), arr);
		pg_register("DOCUMENT_ROOT", "", 0, arr);
		return;
	}
	pg_request_vars();
	register_plain(arr);
}

/* Writes s to stderr as nginx writes a request line in its error log: bytes outside printable
 * ASCII, the double quote and the backslash as \xHH, so that the line's end stays its end. */
static void log_quoted(const char *s)
{
	for (; s && *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (c < 0x20 || c >= 0x7f || c == '"' || c == '\\')
			fprintf(stderr, "\\x%02X", c);
		else
			fputc(c, stderr);
	}
}

/* PHP's log (error_log unset): stderr, which the server logs. In classic mode a message about a
 * request names it at its end, as nginx's error log does (, request: "GET /a.php?x=1
 * HTTP/1.1"); the server moves that into the record's request attribute (daemon/phplog.go). */
static void pg_log_message(const char *message, int syslog_type)
{
	(void)syslog_type;
	if (pg.worker || !pg.active) {
		fprintf(stderr, "%s\n", message);
		return;
	}
	const struct pg_head *h = &pg.req.head;
	fprintf(stderr, "%s, request: \"", message);
	log_quoted(h->field[PG_METHOD]);
	fputc(' ', stderr);
	log_quoted(h->field[PG_URI]);
	fputc(' ', stderr);
	log_quoted(h->field[PG_PROTOCOL]);
	fputs("\"\n", stderr);
}

static zend_result pg_get_request_time(double *t)
{
	*t = pg.req.time;
	return pg.active ? SUCCESS : FAILURE;
}

/* Named fpm-fcgi so that OPcache starts (it only knows some SAPI names) and applications take
 * the paths they take under PHP-FPM; native/README.md explains the choice. */
sapi_module_struct pg_sapi = {
	"fpm-fcgi",
	"Peregrine native runtime (FPM-compatible)",
	pg_startup,
	php_module_shutdown_wrapper,
	pg_activate,
	NULL,                   /* deactivate */
	pg_ub_write,
	pg_flush,
	NULL,                   /* get_stat */
	pg_getenv,
	php_error,
	NULL,                   /* header_handler */
	pg_send_headers,
	NULL,                   /* send_header */
	pg_read_post,
	pg_read_cookies,
	pg_register_variables,
	pg_log_message,
	pg_get_request_time,
	NULL,                   /* terminate_process */
	STANDARD_SAPI_MODULE_PROPERTIES
};

/* fastcgi_finish_request(): the answer goes out now; the script goes on, its output discarded. */
PHP_FUNCTION(fastcgi_finish_request)
{
	ZEND_PARSE_PARAMETERS_NONE();
	if (!pg.active || pg.req.finished)
		RETURN_FALSE;
	php_output_end_all();
	php_header();
	pg_answer_finish();
	RETURN_TRUE;
}

/* getallheaders(), as FPM builds it from the request's variables: "HTTP_USER_AGENT" is
 * "User-Agent", and Content-Type and Content-Length are listed even empty (nginx passes both for
 * every request). */
PHP_FUNCTION(getallheaders)
{
	ZEND_PARSE_PARAMETERS_NONE();
	array_init(return_value);
	if (pg.active)
		pg_request_vars();
	for (size_t i = 0; pg.active && i < pg.req.nvars; i++) {
		const struct pg_pair *v = &pg.req.vars[i];
		char name[256];
		size_t n = 0;
		if (strcmp(v->name, "CONTENT_TYPE") == 0 || strcmp(v->name, "CONTENT_LENGTH") == 0) {
			n = v->name[8] == 'T' ? 12 : 14;
			memcpy(name, v->name[8] == 'T' ? "Content-Type" : "Content-Length", n);
		} else if (v->name_len > 5 && v->name_len < sizeof(name) + 5 && strncmp(v->name, "HTTP_", 5) == 0) {
			for (const char *p = v->name + 5; *p; p++, n++)
				name[n] = *p == '_' ? '-' : (n == 0 || name[n - 1] == '-') ? *p : (char)tolower(*p);
		} else {
			continue;
		}
		add_assoc_stringl_ex(return_value, name, n, v->value, v->value_len);
	}
}

/* Appends a string to a list: PHP's shared empty and one-character strings for those (a
 * request's query, form, content type and length are most often empty), allocated otherwise. */
static void list_addl(zval *list, const char *s, size_t len)
{
	zval v;

	ZVAL_STRINGL_FAST(&v, s, len);
	zend_hash_next_index_insert_new(Z_ARRVAL_P(list), &v);
}

/* peregrine_request_headers(): the request's headers as the server received them, lower-case
 * name => list of values in order (a header sent twice has two), what Peregrine\Http\Request's
 * $headers holds on the cli runtime. getallheaders() has them as nginx passes them to FPM. */
void pg_request_headers(zval *arr)
{
	array_init(arr);
	for (size_t i = 0; pg.active && i < pg.req.head.nheaders; i++) {
		const struct pg_pair *h = &pg.req.head.headers[i];
		zval *values = zend_symtable_str_find(Z_ARRVAL_P(arr), h->name, h->name_len);
		if (values == NULL) {
			zval empty;
			array_init(&empty);
			values = zend_symtable_str_update(Z_ARRVAL_P(arr), h->name, h->name_len, &empty);
		}
		list_addl(values, h->value, h->value_len);
	}
}

PHP_FUNCTION(peregrine_request_headers)
{
	ZEND_PARSE_PARAMETERS_NONE();
	pg_request_headers(return_value);
}

/* A server variable of the current request as $_SERVER has it: value, the one derived from
 * the REQUEST's fields or headers, unless a server parameter of the same name, registered after
 * it, replaces it. Cheaper than pg_param(), which looks through every variable. */
static const char *server_var(const char *name, size_t len, const char *value)
{
	const struct pg_head *h = &pg.req.head;

	for (size_t i = h->nparams; i-- > 0;)
		if (h->params[i].name_len == len && memcmp(h->params[i].name, name, len) == 0)
			return h->params[i].value;
	return value;
}

#define SERVER_VAR(name, value) server_var(name, sizeof(name) - 1, value)

static const char *first_header(const char *name)
{
	for (size_t i = 0; i < pg.req.head.nheaders; i++)
		if (strcmp(pg.req.head.headers[i].name, name) == 0)
			return pg.req.head.headers[i].value;
	return NULL;
}

/* The request's fields as Peregrine\Http\Request has them (struct pg_fields, peregrine.h), each
 * the value $_SERVER would have: from the REQUEST's fields or headers, unless a server parameter
 * of the same name replaces it. */
void pg_request_fields(struct pg_fields *out)
{
	const char *const *f = pg.req.head.field;
	const char *length = SERVER_VAR("CONTENT_LENGTH", first_header("content-length"));
	const char *uri = SERVER_VAR("REQUEST_URI", f[PG_URI]), *q = strchr(uri, '?');
	const char *https = SERVER_VAR("HTTPS", strcmp(f[PG_SCHEME], "https") == 0 ? "on" : NULL);

	out->s[PG_F_METHOD] = SERVER_VAR("REQUEST_METHOD", f[PG_METHOD]);
	out->s[PG_F_URI] = uri;
	out->s[PG_F_PATH] = uri;
	out->s[PG_F_QUERY] = q ? q + 1 : "";
	out->s[PG_F_PROTOCOL] = SERVER_VAR("SERVER_PROTOCOL", f[PG_PROTOCOL]);
	out->s[PG_F_REMOTE_ADDR] = SERVER_VAR("REMOTE_ADDR", f[PG_REMOTE_ADDR]);
	out->s[PG_F_REMOTE_PORT] = SERVER_VAR("REMOTE_PORT", f[PG_REMOTE_PORT]);
	out->s[PG_F_SERVER_ADDR] = SERVER_VAR("SERVER_ADDR", f[PG_SERVER_ADDR]);
	out->s[PG_F_SERVER_PORT] = SERVER_VAR("SERVER_PORT", f[PG_SERVER_PORT]);
	out->s[PG_F_SCHEME] = https && *https && strcasecmp(https, "off") != 0 ? "https" : "http";
	out->s[PG_F_FORM] = "";
	out->s[PG_F_CONTENT_TYPE] = SERVER_VAR("CONTENT_TYPE", pg.req.content_type ? pg.req.content_type : "");
	out->s[PG_F_CONTENT_LENGTH] = length ? length : "";
	for (size_t i = 0; i < PG_NFIELDS; i++)
		out->len[i] = strlen(out->s[i]);
	out->len[PG_F_PATH] = q ? (size_t)(q - uri) : out->len[PG_F_URI];
}

/* peregrine_request(): array, the request in one call, without $_SERVER (whose registration
 * costs more than the rest of a small request): [0] a list of the request's fields as
 * Request::fromFrame() takes them (method, uri, path, query, protocol, remote address and port,
 * server address and port, scheme, form ''), then CONTENT_TYPE and CONTENT_LENGTH ("" when there
 * is none); [1] the headers as peregrine_request_headers() returns them. NativeServer builds its
 * Request with peregrine_request_object() (nativeserver.c), and with this one for a multipart
 * request and to name a request that failed. */
PHP_FUNCTION(peregrine_request)
{
	zval fields, headers;
	struct pg_fields f;

	ZEND_PARSE_PARAMETERS_NONE();
	array_init(return_value);
	if (!pg.active)
		return;
	pg_request_fields(&f);
	array_init_size(&fields, PG_NFIELDS);
	for (size_t i = 0; i < PG_NFIELDS; i++)
		list_addl(&fields, f.s[i], f.len[i]);
	add_next_index_zval(return_value, &fields);
	pg_request_headers(&headers);
	add_next_index_zval(return_value, &headers);
}

/* headers_send(int $status = 200): int, as FrankenPHP has it: sends the headers set so far;
 * with a 1xx status (103 Early Hints) they go out as a HINTS frame and stay set. */
PHP_FUNCTION(headers_send)
{
	zend_long status = 200;

	ZEND_PARSE_PARAMETERS_START(0, 1)
		Z_PARAM_OPTIONAL
		Z_PARAM_LONG(status)
	ZEND_PARSE_PARAMETERS_END();
	int previous = SG(sapi_headers).http_response_code;
	SG(sapi_headers).http_response_code = (int)status;
	if (status >= 100 && status < 200) {
		pg_sending_hints = true;
		int ret = pg_send_headers(&SG(sapi_headers));
		pg_sending_hints = false;
		SG(sapi_headers).http_response_code = previous;
		RETURN_LONG(ret);
	}
	RETURN_LONG(sapi_send_headers());
}

ZEND_BEGIN_ARG_WITH_RETURN_TYPE_INFO_EX(arginfo_handle_request, 0, 1, _IS_BOOL, 0)
	ZEND_ARG_TYPE_INFO(0, handler, IS_CALLABLE, 0)
ZEND_END_ARG_INFO()

ZEND_BEGIN_ARG_WITH_RETURN_TYPE_INFO_EX(arginfo_finish_request, 0, 0, _IS_BOOL, 0)
ZEND_END_ARG_INFO()

ZEND_BEGIN_ARG_WITH_RETURN_TYPE_INFO_EX(arginfo_getallheaders, 0, 0, IS_ARRAY, 0)
ZEND_END_ARG_INFO()

ZEND_BEGIN_ARG_WITH_RETURN_OBJ_INFO_EX(arginfo_request_object, 0, 0, Peregrine\\Http\\Request, 1)
ZEND_END_ARG_INFO()

ZEND_BEGIN_ARG_WITH_RETURN_TYPE_INFO_EX(arginfo_answer, 0, 3, IS_VOID, 0)
	ZEND_ARG_TYPE_INFO(0, status, IS_LONG, 0)
	ZEND_ARG_TYPE_INFO(0, headers, IS_ARRAY, 0)
	ZEND_ARG_TYPE_INFO(0, body, IS_STRING, 0)
ZEND_END_ARG_INFO()

ZEND_BEGIN_ARG_WITH_RETURN_TYPE_INFO_EX(arginfo_output_removable, 0, 1, IS_VOID, 0)
	ZEND_ARG_TYPE_INFO(0, level, IS_LONG, 0)
ZEND_END_ARG_INFO()

ZEND_BEGIN_ARG_WITH_RETURN_TYPE_INFO_EX(arginfo_headers_send, 0, 0, IS_LONG, 0)
	ZEND_ARG_TYPE_INFO_WITH_DEFAULT_VALUE(0, status, IS_LONG, 0, "200")
ZEND_END_ARG_INFO()

const zend_function_entry pg_functions[] = {
	PHP_FE(peregrine_handle_request, arginfo_handle_request)
	PHP_FE(fastcgi_finish_request, arginfo_finish_request)
	PHP_FE(getallheaders, arginfo_getallheaders)
	PHP_FALIAS(apache_request_headers, getallheaders, arginfo_getallheaders)
	PHP_FE(peregrine_request_headers, arginfo_getallheaders)
	PHP_FE(peregrine_request, arginfo_getallheaders)
	PHP_FE(peregrine_request_object, arginfo_request_object)
	PHP_FE(peregrine_answer, arginfo_answer)
	PHP_FE(peregrine_output_removable, arginfo_output_removable)
	PHP_FE(headers_send, arginfo_headers_send)
	PHP_FE_END
};
