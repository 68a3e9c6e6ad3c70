/* nativeserver.c: the native half of php/src/Internal/NativeServer.php's serve(), two steps of a
 * raw handler's request that cost most in PHP (docs/direct.md, "Where a request's CPU goes"):
 * building the Request, and sending the Response's status, headers and body. Each does what the
 * PHP it replaces did, through the same engine calls.
 *
 * peregrine_request_object(): built in PHP (peregrine_request()'s arrays, then
 * Request::fromFrame()), each readonly property's first write took the engine's slow path
 * (scope and type checks, the readonly rules). The object is made here as
 * ReflectionClass::newInstanceWithoutConstructor() makes it and its property slots are written
 * directly, with what fromFrame() writes. A slot written here is initialised, so PHP code sees an
 * initialised readonly property and cannot change it; a lazy property (queryParams, cookies,
 * parsedBody, files) is left as unset() leaves it, for Request::__get() to initialise on first
 * read. The property types are checked against what is written here when the class is looked
 * up; a class that no longer matches is an Error, not a corrupt object.
 */
#include "peregrine.h"

#include <strings.h>

#include "SAPI.h"
#include "Zend/zend_exceptions.h"
#include "Zend/zend_ini.h"
#include "main/php_output.h"

#define REQUEST_CLASS "Peregrine\\Http\\Request"

/* The properties written, and the type each must be declared with. */
enum {
	P_METHOD, P_URI, P_PATH, P_QUERY, P_PROTOCOL, P_REMOTE_ADDR, P_REMOTE_PORT, P_SERVER_ADDR,
	P_SERVER_PORT, P_SCHEME, P_FORM, P_UPLOADS, P_HEADERS, P_BODY, P_QUERY_PARAMS, P_COOKIES,
	P_PARSED_BODY, P_FILES, NPROPS
};

static const struct {
	const char *name;
	uint32_t type; /* the declared type's mask */
} props[NPROPS] = {
	[P_METHOD] = {"method", MAY_BE_STRING},
	[P_URI] = {"uri", MAY_BE_STRING},
	[P_PATH] = {"path", MAY_BE_STRING},
	[P_QUERY] = {"query", MAY_BE_STRING},
	[P_PROTOCOL] = {"protocol", MAY_BE_STRING},
	[P_REMOTE_ADDR] = {"remoteAddr", MAY_BE_STRING},
	[P_REMOTE_PORT] = {"remotePort", MAY_BE_LONG},
	[P_SERVER_ADDR] = {"serverAddr", MAY_BE_STRING},
	[P_SERVER_PORT] = {"serverPort", MAY_BE_LONG},
	[P_SCHEME] = {"scheme", MAY_BE_STRING},
	[P_FORM] = {"form", MAY_BE_STRING},
	[P_UPLOADS] = {"uploads", MAY_BE_ARRAY},
	[P_HEADERS] = {"headers", MAY_BE_ARRAY},
	[P_BODY] = {"body", MAY_BE_STRING},
	[P_QUERY_PARAMS] = {"queryParams", MAY_BE_ARRAY},
	[P_COOKIES] = {"cookies", MAY_BE_ARRAY},
	[P_PARSED_BODY] = {"parsedBody", MAY_BE_ARRAY | MAY_BE_NULL},
	[P_FILES] = {"files", MAY_BE_ARRAY},
};

/* The class and its slots, kept by a worker (whose classes live as long as the process); classic
 * mode, which frees its classes at every request's end, looks them up every time. */
static struct {
	zend_class_entry *ce;
	uint32_t offset[NPROPS];
} request_class;

static zend_class_entry *lookup_class(void)
{
	static const char lc[] = "peregrine\\http\\request";
	zend_class_entry *ce = zend_hash_str_find_ptr(EG(class_table), lc, sizeof(lc) - 1);

	if (ce == NULL || !(ce->ce_flags & ZEND_ACC_LINKED)) { /* not loaded yet: autoloaded */
		zend_string *name = zend_string_init(REQUEST_CLASS, sizeof(REQUEST_CLASS) - 1, 0);
		ce = zend_lookup_class(name);
		zend_string_release(name);
	}
	if (ce == NULL || (ce == request_class.ce && pg.worker))
		return ce;
	request_class.ce = NULL;
	for (size_t i = 0; i < NPROPS; i++) {
		zend_property_info *info = zend_hash_str_find_ptr(&ce->properties_info, props[i].name, strlen(props[i].name));
		if (info == NULL || (info->flags & ZEND_ACC_STATIC) || info->ce != ce ||
		    ZEND_TYPE_PURE_MASK(info->type) != props[i].type || ZEND_TYPE_HAS_NAME(info->type)) {
			zend_throw_error(NULL, "%s has no property $%s of type the runtime writes", REQUEST_CLASS, props[i].name);
			return NULL;
		}
		request_class.offset[i] = info->offset;
	}
	request_class.ce = ce;
	return ce;
}

/* The slot of property i, its value put in by the caller: initialised, as a first write leaves it. */
static zval *slot(zend_object *obj, int i)
{
	zval *p = OBJ_PROP(obj, request_class.offset[i]);

	Z_PROP_FLAG_P(p) = 0;
	return p;
}

/* A lazy property: uninitialised as unset() leaves it, so that reading it calls __get(). */
static void lazy(zend_object *obj, int i)
{
	Z_PROP_FLAG_P(OBJ_PROP(obj, request_class.offset[i])) = 0;
}

/* (int) $s, as PHP casts a string: leading space, trailing junk and exponents allowed, 0 when
 * it is not numeric. */
static zend_long to_long(const char *s, size_t len)
{
	zend_long l;
	double d;
	zend_uchar type = is_numeric_string(s, len, &l, &d, true);

	if (type == IS_DOUBLE)
		return zend_dval_to_lval_cap(d);
	return type == IS_LONG ? l : 0;
}

/* The body as file_get_contents('php://input') reads it. */
static zend_string *read_body(void)
{
	php_stream *s = php_stream_open_wrapper_ex("php://input", "rb", REPORT_ERRORS, NULL, NULL);
	zend_string *body = NULL;

	if (s == NULL)
		return ZSTR_EMPTY_ALLOC();
	body = php_stream_copy_to_mem(s, PHP_STREAM_COPY_ALL, 0);
	php_stream_close(s);
	return body ? body : ZSTR_EMPTY_ALLOC();
}

/* Whether $_FILES is an empty array, as `$_FILES === []` tests it. */
static bool no_files(void)
{
	zval *files = zend_hash_str_find(&EG(symbol_table), "_FILES", sizeof("_FILES") - 1);

	if (files == NULL)
		return false;
	if (Z_TYPE_P(files) == IS_INDIRECT)
		files = Z_INDIRECT_P(files);
	ZVAL_DEREF(files);
	return Z_TYPE_P(files) == IS_ARRAY && zend_hash_num_elements(Z_ARRVAL_P(files)) == 0;
}

/* peregrine_request_object(): ?Peregrine\Http\Request, the current request as
 * NativeServer::request() built it with Request::fromFrame(): the body read from php://input
 * unless a GET or HEAD states none, the query, cookies and form parsed on first read. Null for
 * a multipart request or one with uploaded files, which NativeServer builds from $_POST and
 * $_FILES, and outside a request. */
PHP_FUNCTION(peregrine_request_object)
{
	struct pg_fields f;
	zval headers;

	ZEND_PARSE_PARAMETERS_NONE();
	if (!pg.active)
		RETURN_NULL();
	pg_request_fields(&f);
	if (strncasecmp(f.s[PG_F_CONTENT_TYPE], "multipart/form-data", sizeof("multipart/form-data") - 1) == 0 ||
	    !no_files())
		RETURN_NULL();
	zend_class_entry *ce = lookup_class();
	if (ce == NULL) {
		if (!EG(exception))
			zend_throw_error(NULL, "Class \"%s\" not found", REQUEST_CLASS);
		RETURN_THROWS();
	}
	/* A GET or HEAD without a Content-Length has no body (the server states the length of every
	 * body it passes), so php://input need not be opened for most requests. */
	const char *method = f.s[PG_F_METHOD], *length = f.s[PG_F_CONTENT_LENGTH];
	bool has_body = strcmp(length, "0") != 0 &&
			(*length != '\0' || (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0));
	zend_string *body = has_body ? read_body() : ZSTR_EMPTY_ALLOC();
	if (EG(exception)) {
		zend_string_release(body);
		RETURN_THROWS();
	}
	pg_request_headers(&headers);

	if (object_init_ex(return_value, ce) != SUCCESS) {
		zend_string_release(body);
		zval_ptr_dtor(&headers);
		RETURN_THROWS();
	}
	zend_object *obj = Z_OBJ_P(return_value);
	static const int strings[] = {P_METHOD, P_URI, P_PATH, P_QUERY, P_PROTOCOL, P_REMOTE_ADDR, P_SERVER_ADDR,
				      P_SCHEME, P_FORM};
	static const int fields[] = {PG_F_METHOD, PG_F_URI, PG_F_PATH, PG_F_QUERY, PG_F_PROTOCOL, PG_F_REMOTE_ADDR,
				     PG_F_SERVER_ADDR, PG_F_SCHEME, PG_F_FORM};
	for (size_t i = 0; i < sizeof(strings) / sizeof(*strings); i++) {
		zval *p = slot(obj, strings[i]);
		ZVAL_STRINGL_FAST(p, f.s[fields[i]], f.len[fields[i]]);
	}
	ZVAL_LONG(slot(obj, P_REMOTE_PORT), to_long(f.s[PG_F_REMOTE_PORT], f.len[PG_F_REMOTE_PORT]));
	ZVAL_LONG(slot(obj, P_SERVER_PORT), to_long(f.s[PG_F_SERVER_PORT], f.len[PG_F_SERVER_PORT]));
	ZVAL_EMPTY_ARRAY(slot(obj, P_UPLOADS));
	ZVAL_STR(slot(obj, P_BODY), body);
	/* Parsed on first read only when there is something to parse; the common empty cases cost
	 * nothing. */
	if (f.len[PG_F_QUERY] == 0)
		ZVAL_EMPTY_ARRAY(slot(obj, P_QUERY_PARAMS));
	else
		lazy(obj, P_QUERY_PARAMS);
	if (zend_hash_str_exists(Z_ARRVAL(headers), "cookie", sizeof("cookie") - 1))
		lazy(obj, P_COOKIES);
	else
		ZVAL_EMPTY_ARRAY(slot(obj, P_COOKIES));
	if (zend_hash_str_exists(Z_ARRVAL(headers), "content-type", sizeof("content-type") - 1))
		lazy(obj, P_PARSED_BODY);
	else
		ZVAL_NULL(slot(obj, P_PARSED_BODY));
	ZVAL_EMPTY_ARRAY(slot(obj, P_FILES));
	ZVAL_COPY_VALUE(slot(obj, P_HEADERS), &headers);
}

/* header("$name: $value", $replace), as PHP's header() does it. False when the value cannot be
 * made a string (an exception is thrown). */
static bool add_header(const zend_string *name, zval *value, bool replace)
{
	zend_string *v = zval_try_get_string(value);

	if (v == NULL)
		return false;
	zend_string *line = zend_string_concat3(ZSTR_VAL(name), ZSTR_LEN(name), ": ", 2, ZSTR_VAL(v), ZSTR_LEN(v));
	sapi_header_line ctr = {.line = ZSTR_VAL(line), .line_len = ZSTR_LEN(line)};
	sapi_header_op(replace ? SAPI_HEADER_REPLACE : SAPI_HEADER_ADD, &ctr);
	zend_string_release(line);
	zend_string_release(v);
	return EG(exception) == NULL;
}

/* http_response_code($status), as PHP's does it. */
static void set_status(zend_long status)
{
	if (SG(headers_sent) && !SG(request_info).no_headers) {
		const char *file = php_output_get_start_filename();
		if (file)
			php_error_docref(NULL, E_WARNING, "Cannot set response code - headers already sent (output started at %s:%d)",
					 file, php_output_get_start_lineno());
		else
			php_error_docref(NULL, E_WARNING, "Cannot set response code - headers already sent");
		return;
	}
	SG(sapi_headers).http_response_code = (int)status;
}

/* peregrine_answer(int $status, array $headers, string $body): void, what NativeServer::send()
 * did with header(), ini_set(), http_response_code() and echo: each header's values set with
 * header() (the first replacing any of that name the handler set, the others added), no
 * Content-Type unless the answer has one (default_mimetype emptied), then the status (after the
 * headers: "Location" and "WWW-Authenticate" would change it), then the body output. The
 * headers were checked (Response's constructor, HeaderCheck): a name is a token and a value
 * has no line break; header() refuses a line break anyway. */
PHP_FUNCTION(peregrine_answer)
{
	zend_long status;
	HashTable *headers;
	zend_string *body, *name;
	zend_ulong index;
	zval *values;
	bool typed = false;

	ZEND_PARSE_PARAMETERS_START(3, 3)
		Z_PARAM_LONG(status)
		Z_PARAM_ARRAY_HT(headers)
		Z_PARAM_STR(body)
	ZEND_PARSE_PARAMETERS_END();
	ZEND_HASH_FOREACH_KEY_VAL(headers, index, name, values) {
		zend_string *n = name ? zend_string_copy(name) : zend_long_to_str((zend_long)index);
		bool ok = true;
		ZVAL_DEREF(values);
		if (Z_TYPE_P(values) == IS_ARRAY) {
			bool replace = true;
			zval *value;
			ZEND_HASH_FOREACH_VAL(Z_ARRVAL_P(values), value) {
				if (!(ok = add_header(n, value, replace)))
					break;
				replace = false;
			} ZEND_HASH_FOREACH_END();
		} else {
			ok = add_header(n, values, true);
		}
		typed = typed || zend_binary_strcasecmp(ZSTR_VAL(n), ZSTR_LEN(n), "Content-Type", sizeof("Content-Type") - 1) == 0;
		zend_string_release(n);
		if (!ok)
			RETURN_THROWS();
	} ZEND_HASH_FOREACH_END();
	if (!typed) {
		/* As under the CLI runtime, no Content-Type unless the response has one. */
		zend_string *key = zend_string_init("default_mimetype", sizeof("default_mimetype") - 1, 0);
		zend_alter_ini_entry_chars_ex(key, "", 0, PHP_INI_USER, PHP_INI_STAGE_RUNTIME, 0);
		zend_string_release(key);
	}
	set_status(status);
	if (EG(exception))
		RETURN_THROWS();
	if (ZSTR_LEN(body) > 0) /* as echo, which writes nothing for '' */
		php_output_write(ZSTR_VAL(body), ZSTR_LEN(body));
}

/* peregrine_output_removable(int $level): void makes every output buffer above $level removable
 * and cleanable. A handler that leaves a buffer opened with ob_start(null, 0, 0) open would
 * otherwise keep call() from closing it (ob_get_clean() fails on it, and call() looped on that
 * until exec_timeout killed the worker, logging a notice each time), and PHP would send what
 * it holds to the client at the request's end: a raw handler's echo goes to the log, never into
 * the answer. The request's end removes every buffer anyway (php_output_end_all() forces it);
 * this only lets call() do it first. */
PHP_FUNCTION(peregrine_output_removable)
{
	zend_long level;

	ZEND_PARSE_PARAMETERS_START(1, 1)
		Z_PARAM_LONG(level)
	ZEND_PARSE_PARAMETERS_END();
	php_output_handler **handlers = (php_output_handler **)zend_stack_base(&OG(handlers));
	int n = zend_stack_count(&OG(handlers));
	for (int i = level < 0 ? 0 : (level > n ? n : (int)level); i < n; i++)
		handlers[i]->flags |= PHP_OUTPUT_HANDLER_CLEANABLE | PHP_OUTPUT_HANDLER_REMOVABLE;
}
