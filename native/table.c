/* table.c: Peregrine\Table, rows in the shared segment the daemon lays out (docs/tables.md).
 *
 * Writers take the table's lock (the owner's pid) and journal the old bytes of everything they
 * change before changing it; a process that finds the lock held by a dead pid takes it over and
 * writes the journal back, so that a writer killed mid-write never leaves a torn row or a held
 * lock. Readers take no lock: they copy under the table's sequence number (odd while a write is
 * under way) and start again when it moved. No PHP code and no allocation runs under the lock,
 * so only a crash can leave it held. */
#include "table.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "zend_exceptions.h"
#include "zend_interfaces.h"
#include "ext/spl/spl_exceptions.h"

/* The segment as this process maps it, once, on the first open. */
static struct {
	char *base;
	size_t size;
	zend_string **names; /* each table's column names, PGT_MAX_COLUMNS a table, hashed once */
} seg;

static zend_class_entry *table_ce, *table_exception_ce;
static zend_object_handlers table_handlers;

typedef struct {
	struct pgt_desc *d;
	zend_object std;
} table_obj;

/* One table's pointers, derived from its descriptor. */
typedef struct {
	struct pgt_desc *d;
	struct pgt_state *st;
	char *rows;
	uint32_t *buckets, *ibuckets;
} tbl;

static inline table_obj *obj_of(zend_object *o) { return (table_obj *)((char *)o - XtOffsetOf(table_obj, std)); }

static tbl tbl_of(struct pgt_desc *d)
{
	tbl t = {d, (struct pgt_state *)(seg.base + d->state_off), seg.base + d->rows_off,
		 (uint32_t *)(seg.base + d->buckets_off), (uint32_t *)(seg.base + d->ibuckets_off)};
	return t;
}

static inline char *row_at(const tbl *t, uint32_t i) { return t->rows + (size_t)(i - 1) * t->d->stride; }
static inline uint32_t *hnext(const tbl *t, char *r) { return (uint32_t *)(r + t->d->hnext_off); }
static inline uint32_t *inext(const tbl *t, char *r, int ix) { return (uint32_t *)(r + t->d->inext_off) + ix; }
static inline uint8_t *used(const tbl *t, char *r) { return (uint8_t *)(r + t->d->used_off); }
static inline uint32_t *ibucket(const tbl *t, int ix, uint32_t b) { return t->ibuckets + (size_t)ix * t->d->nbuckets + b; }

/* Throws a TableException; callers return right after. */
static ZEND_COLD void table_error(const char *fmt, ...) ZEND_ATTRIBUTE_FORMAT(printf, 1, 2);
static void table_error(const char *fmt, ...)
{
	va_list ap;
	char *msg;

	va_start(ap, fmt);
	zend_vspprintf(&msg, 0, fmt, ap);
	va_end(ap);
	zend_throw_exception(table_exception_ce, msg, 0);
	efree(msg);
}

static ZEND_COLD void table_full(const tbl *t)
{
	table_error("table %s is full: all its %u rows are used (raise tables.define.%s.rows)", t->d->name, t->d->capacity, t->d->name);
}

#if defined(__x86_64__) || defined(__i386__)
#define cpu_relax() __builtin_ia32_pause()
#else
#define cpu_relax() __asm__ __volatile__("" ::: "memory")
#endif

/* ---- hashing ---- */

static inline uint64_t mix64(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdULL;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ULL;
	x ^= x >> 33;
	return x;
}

/* A key as the table stores it: an int, or a string of at most key_size bytes. */
typedef struct {
	int64_t i;
	const char *s;
	size_t len;
} key_t_;

static uint32_t key_bucket(const tbl *t, const key_t_ *k)
{
	uint64_t h;
	if (t->d->key_kind == PGT_KEY_INT) {
		h = mix64((uint64_t)k->i);
	} else {
		h = 0xcbf29ce484222325ULL;
		for (size_t i = 0; i < k->len; i++)
			h = (h ^ (uint8_t)k->s[i]) * 0x100000001b3ULL;
		h = mix64(h);
	}
	return (uint32_t)(h % t->d->nbuckets);
}

static inline uint32_t value_bucket(const tbl *t, int64_t v) { return (uint32_t)(mix64((uint64_t)v) % t->d->nbuckets); }

/* Whether row r (a copy or the shared row) holds key k. */
static bool key_equals(const tbl *t, const char *r, const key_t_ *k)
{
	if (t->d->key_kind == PGT_KEY_INT) {
		int64_t v;
		memcpy(&v, r, 8);
		return v == k->i;
	}
	uint16_t len;
	memcpy(&len, r, 2);
	return len == k->len && memcmp(r + 2, k->s, k->len) == 0;
}

/* ---- column values ---- */

static int64_t int_at(const char *r, const struct pgt_column *c)
{
	const char *p = r + c->offset;
	switch (c->type) {
	case PGT_INT8: return *(const int8_t *)p;
	case PGT_INT16: { int16_t v; memcpy(&v, p, 2); return v; }
	case PGT_INT32: { int32_t v; memcpy(&v, p, 4); return v; }
	default: { int64_t v; memcpy(&v, p, 8); return v; }
	}
}

static void int_put(char *r, const struct pgt_column *c, int64_t v)
{
	char *p = r + c->offset;
	switch (c->type) {
	case PGT_INT8: *(int8_t *)p = (int8_t)v; break;
	case PGT_INT16: { int16_t x = (int16_t)v; memcpy(p, &x, 2); break; }
	case PGT_INT32: { int32_t x = (int32_t)v; memcpy(p, &x, 4); break; }
	default: memcpy(p, &v, 8);
	}
}

static size_t value_size(const struct pgt_column *c) { return c->type == PGT_STRING ? 2 + c->size : c->size; }

static void column_zval(const char *r, const struct pgt_column *c, zval *zv)
{
	if (c->type == PGT_FLOAT) {
		double d;
		memcpy(&d, r + c->offset, 8);
		ZVAL_DOUBLE(zv, d);
	} else if (c->type == PGT_STRING) {
		uint16_t len;
		memcpy(&len, r + c->offset, 2);
		ZVAL_STRINGL(zv, r + c->offset + 2, MIN(len, c->size));
	} else {
		ZVAL_LONG(zv, int_at(r, c));
	}
}

static void row_zval(const tbl *t, const char *r, zval *zv)
{
	size_t ti = (size_t)((const char *)t->d - (seg.base + sizeof(struct pgt_header))) / sizeof(struct pgt_desc);
	zend_string **names = seg.names + ti * PGT_MAX_COLUMNS;

	array_init_size(zv, t->d->ncols);
	zend_hash_real_init_mixed(Z_ARRVAL_P(zv));
	for (uint32_t i = 0; i < t->d->ncols; i++) {
		zval v;
		column_zval(r, &t->d->cols[i], &v);
		zend_hash_add_new(Z_ARRVAL_P(zv), names[i], &v);
	}
}

static void key_zval(const tbl *t, const char *r, zval *zv)
{
	if (t->d->key_kind == PGT_KEY_INT) {
		int64_t v;
		memcpy(&v, r, 8);
		ZVAL_LONG(zv, v);
	} else {
		uint16_t len;
		memcpy(&len, r, 2);
		ZVAL_STRINGL(zv, r + 2, MIN(len, t->d->key_size));
	}
}

static const struct pgt_column *column_named(const tbl *t, const char *name, size_t len)
{
	for (uint32_t i = 0; i < t->d->ncols; i++)
		if (strnlen(t->d->cols[i].name, sizeof t->d->cols[i].name) == len && memcmp(t->d->cols[i].name, name, len) == 0)
			return &t->d->cols[i];
	return NULL;
}

static const char *type_name(const struct pgt_column *c)
{
	static const char *names[] = {"?", "int8", "int16", "int32", "int64", "float", "string"};
	return c->type <= PGT_STRING ? names[c->type] : "?";
}

/* Checks v against column c and writes it into the row image r; throws and returns false when
 * it does not fit. */
static bool value_put(const tbl *t, char *r, const struct pgt_column *c, zval *v)
{
	ZVAL_DEREF(v);
	switch (c->type) {
	case PGT_STRING:
		if (Z_TYPE_P(v) != IS_STRING) {
			table_error("table %s, column %s: want a string, got %s", t->d->name, c->name, zend_zval_type_name(v));
			return false;
		}
		if (Z_STRLEN_P(v) > c->size) {
			table_error("table %s, column %s: a string of %zu bytes is longer than the column's %u", t->d->name, c->name,
			      Z_STRLEN_P(v), c->size);
			return false;
		}
		uint16_t len = (uint16_t)Z_STRLEN_P(v);
		memcpy(r + c->offset, &len, 2);
		memcpy(r + c->offset + 2, Z_STRVAL_P(v), len);
		memset(r + c->offset + 2 + len, 0, c->size - len);
		return true;
	case PGT_FLOAT:
		if (Z_TYPE_P(v) != IS_DOUBLE && Z_TYPE_P(v) != IS_LONG) {
			table_error("table %s, column %s: want a float, got %s", t->d->name, c->name, zend_zval_type_name(v));
			return false;
		}
		double d = Z_TYPE_P(v) == IS_LONG ? (double)Z_LVAL_P(v) : Z_DVAL_P(v);
		memcpy(r + c->offset, &d, 8);
		return true;
	default:
		if (Z_TYPE_P(v) != IS_LONG) {
			table_error("table %s, column %s: want an int, got %s", t->d->name, c->name, zend_zval_type_name(v));
			return false;
		}
		int64_t n = Z_LVAL_P(v), lim = c->size == 8 ? 0 : (int64_t)1 << (8 * c->size - 1);
		if (lim && (n < -lim || n >= lim)) {
			table_error("table %s, column %s: " ZEND_LONG_FMT " does not fit an %s", t->d->name, c->name, n, type_name(c));
			return false;
		}
		int_put(r, c, n);
		return true;
	}
}

/* Reads a key argument; throws and returns false when it is not the table's kind. */
static bool key_arg(const tbl *t, zval *z, key_t_ *k)
{
	ZVAL_DEREF(z);
	if (t->d->key_kind == PGT_KEY_INT) {
		if (Z_TYPE_P(z) != IS_LONG) {
			table_error("table %s: the key is an int, got %s", t->d->name, zend_zval_type_name(z));
			return false;
		}
		k->i = Z_LVAL_P(z);
		return true;
	}
	if (Z_TYPE_P(z) != IS_STRING) {
		table_error("table %s: the key is a string, got %s", t->d->name, zend_zval_type_name(z));
		return false;
	}
	if (Z_STRLEN_P(z) > t->d->key_size) {
		table_error("table %s: a key of %zu bytes is longer than the table's string(%u)", t->d->name, Z_STRLEN_P(z), t->d->key_size);
		return false;
	}
	k->s = Z_STRVAL_P(z);
	k->len = Z_STRLEN_P(z);
	return true;
}

static void key_put(const tbl *t, char *r, const key_t_ *k)
{
	if (t->d->key_kind == PGT_KEY_INT) {
		memcpy(r, &k->i, 8);
	} else {
		uint16_t len = (uint16_t)k->len;
		memcpy(r, &len, 2);
		memcpy(r + 2, k->s, k->len);
		memset(r + 2 + k->len, 0, t->d->key_size - k->len);
	}
}

/* ---- the lock and the undo journal ---- */

static bool owner_dead(uint32_t pid) { return pid != 0 && kill((pid_t)pid, 0) == -1 && errno == ESRCH; }

/* Writes the journal back in reverse and makes the sequence even: the write under way when its
 * writer died is undone as a whole. Called with the lock taken over. */
static void recover(const tbl *t)
{
	struct pgt_state *st = t->st;
	uint32_t n = st->jn, pos[80], k = 0, off = 0;

	while (k < n && k < 80 && off + 16 <= t->d->journal_cap) {
		uint32_t len;
		memcpy(&len, st->journal + off + 8, 4);
		if (off + 16 + len > t->d->journal_cap)
			break;
		pos[k++] = off;
		off += 16 + ((len + 7) & ~7u);
	}
	while (k-- > 0) {
		uint64_t at;
		uint32_t len;
		memcpy(&at, st->journal + pos[k], 8);
		memcpy(&len, st->journal + pos[k] + 8, 4);
		if (at + len <= seg.size)
			memcpy(seg.base + at, st->journal + pos[k] + 16, len);
	}
	__atomic_thread_fence(__ATOMIC_RELEASE);
	st->jn = 0;
	st->jused = 0;
	if (st->seq & 1)
		__atomic_store_n(&st->seq, st->seq + 1, __ATOMIC_RELEASE);
}

/* Takes the table's lock without announcing a write: where() holds it this way to walk a chain
 * that writers keep changing. The pid is asked for each time, never cached: the template forks
 * workers with a raw clone(), which runs no atfork handler, and PHP code may pcntl_fork(). */
static void acquire(const tbl *t)
{
	struct pgt_state *st = t->st;
	uint32_t me = (uint32_t)getpid();
	for (unsigned spins = 0;; spins++) {
		uint32_t owner = 0;
		if (__atomic_compare_exchange_n(&st->lock, &owner, me, false, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
			break;
		if (owner == me || ((spins & 63) == 63 && owner_dead(owner))) {
			/* A dead owner's, or ours from before a fatal error: take it over. */
			if (__atomic_compare_exchange_n(&st->lock, &owner, me, false, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) {
				recover(t);
				break;
			}
			continue;
		}
		if (spins > 64)
			sched_yield();
		else
			cpu_relax();
	}
	if (st->jn != 0 || (st->seq & 1)) /* a previous owner died after releasing nothing */
		recover(t);
}

/* Releases a lock taken by acquire(), which changed nothing. */
static void release(const tbl *t) { __atomic_store_n(&t->st->lock, 0, __ATOMIC_RELEASE); }

/* Takes the table's lock for a write. */
static void lock(const tbl *t)
{
	acquire(t);
	__atomic_store_n(&t->st->seq, t->st->seq + 1, __ATOMIC_RELAXED); /* odd: a write is under way */
	__atomic_thread_fence(__ATOMIC_RELEASE);
}

static void unlock(const tbl *t)
{
	struct pgt_state *st = t->st;
	__atomic_thread_fence(__ATOMIC_RELEASE);
	st->jn = 0;
	st->jused = 0;
	__atomic_store_n(&st->seq, st->seq + 1, __ATOMIC_RELEASE);
	__atomic_store_n(&st->lock, 0, __ATOMIC_RELEASE);
}

/* Journals the len bytes at p before the caller changes them. The design bounds what one write
 * changes (a row image and a few dozen words), so the journal never overflows. */
static void save(const tbl *t, void *p, uint32_t len)
{
	struct pgt_state *st = t->st;
	uint8_t *j = st->journal + st->jused;
	uint64_t at = (uint64_t)((char *)p - seg.base);

	ZEND_ASSERT(st->jused + 16 + len <= t->d->journal_cap);
	memcpy(j, &at, 8);
	memcpy(j + 8, &len, 4);
	memset(j + 12, 0, 4);
	memcpy(j + 16, p, len);
	st->jused += 16 + ((len + 7) & ~7u);
	__atomic_thread_fence(__ATOMIC_RELEASE); /* the entry, then its count, then the change */
	st->jn++;
	__atomic_thread_fence(__ATOMIC_RELEASE);
}

static void save_put32(const tbl *t, uint32_t *p, uint32_t v)
{
	save(t, p, 4);
	*p = v;
}

/* ---- reading without the lock ---- */

/* Returns an even sequence to read under; takes a dead writer's lock over (and lets it go) when
 * the sequence stays odd. */
static uint32_t read_begin(const tbl *t)
{
	for (unsigned spins = 0;; spins++) {
		uint32_t s = __atomic_load_n(&t->st->seq, __ATOMIC_ACQUIRE);
		if (!(s & 1))
			return s;
		if ((spins & 255) == 255 && owner_dead(__atomic_load_n(&t->st->lock, __ATOMIC_RELAXED))) {
			lock(t);
			unlock(t);
		} else if (spins > 64) {
			sched_yield();
		} else {
			cpu_relax();
		}
	}
}

/* Whether a write moved the sequence since s, counting the retry this means. */
static bool read_retry(const tbl *t, uint32_t s)
{
	__atomic_thread_fence(__ATOMIC_ACQUIRE);
	if (__atomic_load_n(&t->st->seq, __ATOMIC_RELAXED) == s)
		return false;
	__atomic_fetch_add(&t->st->read_retries, 1, __ATOMIC_RELAXED);
	return true;
}

/* The row holding k, or 0. Safe without the lock: every row number is checked and the walk is
 * bounded, so a concurrent write yields a wrong answer that the caller's sequence check drops. */
static uint32_t find(const tbl *t, const key_t_ *k, uint32_t *prev)
{
	uint32_t i = __atomic_load_n(&t->buckets[key_bucket(t, k)], __ATOMIC_RELAXED), p = 0, cap = t->d->capacity;
	for (uint32_t steps = 0; i != 0 && i <= cap && steps <= cap; steps++) {
		char *r = row_at(t, i);
		if (*used(t, r) && key_equals(t, r, k)) {
			if (prev)
				*prev = p;
			return i;
		}
		p = i;
		i = *hnext(t, r);
	}
	return 0;
}

/* Copies row k into buf (stride bytes) consistently; false when there is no such row. */
static bool read_row(const tbl *t, const key_t_ *k, char *buf)
{
	for (;;) {
		uint32_t s = read_begin(t), i = find(t, k, NULL);
		if (i)
			memcpy(buf, row_at(t, i), t->d->stride);
		if (!read_retry(t, s))
			return i != 0;
	}
}

/* ---- writing under the lock ---- */

static void index_link(const tbl *t, int ix, uint32_t i, int64_t v)
{
	uint32_t *head = ibucket(t, ix, value_bucket(t, v));
	*inext(t, row_at(t, i), ix) = *head; /* the row itself is journaled whole */
	save_put32(t, head, i);
}

static void index_unlink(const tbl *t, int ix, uint32_t i, int64_t v)
{
	uint32_t *head = ibucket(t, ix, value_bucket(t, v)), p = *head, next = *inext(t, row_at(t, i), ix);
	if (p == i) {
		save_put32(t, head, next);
		return;
	}
	for (uint32_t steps = 0; p != 0 && p <= t->d->capacity && steps <= t->d->capacity; steps++) {
		uint32_t *link = inext(t, row_at(t, p), ix);
		if (*link == i) {
			save_put32(t, link, next);
			return;
		}
		p = *link;
	}
}

static int64_t index_value(const tbl *t, const char *r, int ix)
{
	for (uint32_t c = 0; c < t->d->ncols; c++)
		if (t->d->cols[c].index == ix)
			return int_at(r, &t->d->cols[c]);
	return 0;
}

/* Takes a free row for k, linked into its hash chain with zeroed columns; 0 when the table is
 * full. The caller links the indexes once the columns are written. */
static uint32_t insert(const tbl *t, const key_t_ *k)
{
	struct pgt_state *st = t->st;
	uint32_t i;

	if (st->free_head != 0 && st->free_head <= t->d->capacity) {
		i = st->free_head;
		save_put32(t, &st->free_head, *hnext(t, row_at(t, i)));
	} else if (st->hwm < t->d->capacity) {
		i = st->hwm + 1;
		save_put32(t, &st->hwm, i);
	} else {
		return 0;
	}
	char *r = row_at(t, i);
	save(t, r, t->d->stride);
	memset(r, 0, t->d->stride);
	key_put(t, r, k);
	uint32_t *head = &t->buckets[key_bucket(t, k)];
	*hnext(t, r) = *head;
	*used(t, r) = 1;
	save_put32(t, head, i);
	save_put32(t, &st->count, st->count + 1);
	return i;
}

/* Writes the staged columns (mask) of img into row i, moving it between index chains when an
 * indexed value changes; new says the row's indexes are not linked yet. */
static void write_columns(const tbl *t, uint32_t i, const char *img, uint64_t mask, bool new)
{
	char *r = row_at(t, i);
	int64_t before[PGT_MAX_INDEXES];

	if (!new)
		save(t, r, t->d->stride);
	for (uint32_t ix = 0; ix < t->d->nindexes; ix++)
		before[ix] = index_value(t, r, (int)ix);
	for (uint32_t c = 0; c < t->d->ncols; c++)
		if (mask & (1ull << c))
			memcpy(r + t->d->cols[c].offset, img + t->d->cols[c].offset, value_size(&t->d->cols[c]));
	for (uint32_t ix = 0; ix < t->d->nindexes; ix++) {
		int64_t after = index_value(t, r, (int)ix);
		if (new) {
			index_link(t, (int)ix, i, after);
		} else if (after != before[ix]) {
			index_unlink(t, (int)ix, i, before[ix]);
			index_link(t, (int)ix, i, after);
		}
	}
}

static void remove_row(const tbl *t, uint32_t i, uint32_t prev, const key_t_ *k)
{
	struct pgt_state *st = t->st;
	char *r = row_at(t, i);

	for (uint32_t ix = 0; ix < t->d->nindexes; ix++)
		index_unlink(t, (int)ix, i, index_value(t, r, (int)ix));
	uint32_t next = *hnext(t, r);
	if (prev)
		save_put32(t, hnext(t, row_at(t, prev)), next);
	else
		save_put32(t, &t->buckets[key_bucket(t, k)], next);
	save(t, r, t->d->stride);
	*used(t, r) = 0;
	*hnext(t, r) = st->free_head;
	save_put32(t, &st->free_head, i);
	save_put32(t, &st->count, st->count - 1);
}

/* Finds row k or creates it at zeros, under the lock; 0 when the table is full. */
static uint32_t find_or_insert(const tbl *t, const key_t_ *k, bool *new)
{
	uint32_t i = find(t, k, NULL);
	*new = false;
	if (!i) {
		i = insert(t, k);
		*new = i != 0;
	}
	return i;
}

/* ---- the segment ---- */

static bool map_segment(void)
{
	if (seg.base)
		return true;
	const char *path = getenv("PEREGRINE_TABLES");
	if (!path || !*path) {
		table_error("no shared tables: define them under tables.define in the server's config (docs/tables.md)");
		return false;
	}
	int fd = open(path, O_RDWR | O_CLOEXEC);
	struct stat sb;
	if (fd < 0 || fstat(fd, &sb) != 0 || (size_t)sb.st_size < sizeof(struct pgt_header)) {
		table_error("the shared tables at %s cannot be opened: %s", path, strerror(errno));
		if (fd >= 0)
			close(fd);
		return false;
	}
	void *p = mmap(NULL, (size_t)sb.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (p == MAP_FAILED) {
		table_error("the shared tables at %s cannot be mapped: %s", path, strerror(errno));
		return false;
	}
	const struct pgt_header *h = p;
	if (memcmp(h->magic, PGT_MAGIC, 8) != 0 || h->version != PGT_VERSION || h->size != (uint64_t)sb.st_size) {
		munmap(p, (size_t)sb.st_size);
		table_error("%s is not a shared tables segment of this version", path);
		return false;
	}
	/* Persistent and never freed: they live as long as the mapping, the process's life. */
	seg.names = pecalloc((size_t)h->ntables * PGT_MAX_COLUMNS, sizeof(zend_string *), 1);
	for (uint32_t i = 0; i < h->ntables; i++) {
		const struct pgt_desc *d = (const struct pgt_desc *)((char *)p + sizeof *h + (size_t)i * sizeof *d);
		for (uint32_t c = 0; c < d->ncols && c < PGT_MAX_COLUMNS; c++) {
			zend_string *name = zend_string_init(d->cols[c].name, strnlen(d->cols[c].name, sizeof d->cols[c].name), 1);
			zend_string_hash_val(name);
			seg.names[i * PGT_MAX_COLUMNS + c] = name;
		}
	}
	seg.base = p;
	seg.size = (size_t)sb.st_size;
	return true;
}

static struct pgt_desc *desc_named(const char *name, size_t len)
{
	const struct pgt_header *h = (const struct pgt_header *)seg.base;
	for (uint32_t i = 0; i < h->ntables; i++) {
		struct pgt_desc *d = (struct pgt_desc *)(seg.base + sizeof *h + (size_t)i * sizeof(struct pgt_desc));
		if (strnlen(d->name, sizeof d->name) == len && memcmp(d->name, name, len) == 0)
			return d;
	}
	return NULL;
}

/* ---- the class ---- */

#define THIS_TBL() tbl_of(obj_of(Z_OBJ_P(ZEND_THIS))->d)

static zend_object *table_new(zend_class_entry *ce)
{
	table_obj *o = zend_object_alloc(sizeof(table_obj), ce);
	zend_object_std_init(&o->std, ce);
	object_properties_init(&o->std, ce);
	o->std.handlers = &table_handlers;
	return &o->std;
}

PHP_METHOD(Peregrine_Table, __construct) {}

PHP_METHOD(Peregrine_Table, open)
{
	zend_string *name;
	ZEND_PARSE_PARAMETERS_START(1, 1)
		Z_PARAM_STR(name)
	ZEND_PARSE_PARAMETERS_END();
	if (!map_segment())
		RETURN_THROWS();
	struct pgt_desc *d = desc_named(ZSTR_VAL(name), ZSTR_LEN(name));
	if (!d) {
		table_error("unknown table %s: the server's tables.define does not name it", ZSTR_VAL(name));
		RETURN_THROWS();
	}
	object_init_ex(return_value, table_ce);
	obj_of(Z_OBJ_P(return_value))->d = d;
}

/* The stride-sized scratch row: on the stack when small. */
#define ROW_BUF(t, name) \
	char name##_stack[1024]; \
	char *name = (t).d->stride <= sizeof name##_stack ? name##_stack : emalloc((t).d->stride)
#define ROW_FREE(name) do { if (name != name##_stack) efree(name); } while (0)

PHP_METHOD(Peregrine_Table, get)
{
	zval *key;
	zend_string *column = NULL;
	ZEND_PARSE_PARAMETERS_START(1, 2)
		Z_PARAM_ZVAL(key)
		Z_PARAM_OPTIONAL
		Z_PARAM_STR_OR_NULL(column)
	ZEND_PARSE_PARAMETERS_END();
	tbl t = THIS_TBL();
	key_t_ k;
	if (!key_arg(&t, key, &k))
		RETURN_THROWS();
	const struct pgt_column *c = NULL;
	if (column && !(c = column_named(&t, ZSTR_VAL(column), ZSTR_LEN(column)))) {
		table_error("table %s has no column %s", t.d->name, ZSTR_VAL(column));
		RETURN_THROWS();
	}
	ROW_BUF(t, buf);
	if (read_row(&t, &k, buf)) {
		if (c)
			column_zval(buf, c, return_value);
		else
			row_zval(&t, buf, return_value);
	} else {
		RETVAL_NULL();
	}
	ROW_FREE(buf);
}

PHP_METHOD(Peregrine_Table, exists)
{
	zval *key;
	ZEND_PARSE_PARAMETERS_START(1, 1)
		Z_PARAM_ZVAL(key)
	ZEND_PARSE_PARAMETERS_END();
	tbl t = THIS_TBL();
	key_t_ k;
	if (!key_arg(&t, key, &k))
		RETURN_THROWS();
	for (;;) {
		uint32_t s = read_begin(&t), i = find(&t, &k, NULL);
		if (!read_retry(&t, s))
			RETURN_BOOL(i != 0);
	}
}

PHP_METHOD(Peregrine_Table, set)
{
	zval *key, *val;
	HashTable *row;
	zend_string *name;
	ZEND_PARSE_PARAMETERS_START(2, 2)
		Z_PARAM_ZVAL(key)
		Z_PARAM_ARRAY_HT(row)
	ZEND_PARSE_PARAMETERS_END();
	tbl t = THIS_TBL();
	key_t_ k;
	if (!key_arg(&t, key, &k))
		RETURN_THROWS();
	ROW_BUF(t, img);
	uint64_t mask = 0;
	ZEND_HASH_FOREACH_STR_KEY_VAL(row, name, val) {
		const struct pgt_column *c = name ? column_named(&t, ZSTR_VAL(name), ZSTR_LEN(name)) : NULL;
		if (!c) {
			if (name)
				table_error("table %s has no column %s", t.d->name, ZSTR_VAL(name));
			else
				table_error("table %s: a row is an array of column names to values, got an integer key", t.d->name);
			ROW_FREE(img);
			RETURN_THROWS();
		}
		if (!value_put(&t, img, c, val)) {
			ROW_FREE(img);
			RETURN_THROWS();
		}
		mask |= 1ull << (c - t.d->cols);
	} ZEND_HASH_FOREACH_END();

	lock(&t);
	bool new;
	uint32_t i = find_or_insert(&t, &k, &new);
	if (i)
		write_columns(&t, i, img, mask, new);
	unlock(&t);
	ROW_FREE(img);
	if (!i) {
		table_full(&t);
		RETURN_THROWS();
	}
}

PHP_METHOD(Peregrine_Table, del)
{
	zval *key;
	ZEND_PARSE_PARAMETERS_START(1, 1)
		Z_PARAM_ZVAL(key)
	ZEND_PARSE_PARAMETERS_END();
	tbl t = THIS_TBL();
	key_t_ k;
	if (!key_arg(&t, key, &k))
		RETURN_THROWS();
	lock(&t);
	uint32_t prev = 0, i = find(&t, &k, &prev);
	if (i)
		remove_row(&t, i, prev, &k);
	unlock(&t);
	RETURN_BOOL(i != 0);
}

/* One column of an incr or decr: what to add, checked before the lock is taken. */
typedef struct {
	const struct pgt_column *c;
	zend_long n;
	double f;
} delta;

/* Checks that column name can be added to by by (NULL: 1) and fills d; throws and returns false
 * otherwise. */
static bool delta_arg(const tbl *t, const char *name, size_t len, zval *by, int sign, delta *d)
{
	const struct pgt_column *c = column_named(t, name, len);
	if (!c) {
		table_error("table %s has no column %s", t->d->name, name);
		return false;
	}
	if (c->type == PGT_STRING) {
		table_error("table %s, column %s: incr and decr need an int or float column, not string(%u)", t->d->name, c->name, c->size);
		return false;
	}
	if (by) {
		ZVAL_DEREF(by);
		if (Z_TYPE_P(by) != IS_LONG && Z_TYPE_P(by) != IS_DOUBLE) {
			table_error("table %s, column %s: incr and decr add an int or a float, got %s", t->d->name, c->name, zend_zval_type_name(by));
			return false;
		}
		if (c->type != PGT_FLOAT && Z_TYPE_P(by) == IS_DOUBLE) {
			table_error("table %s, column %s: an int column is incremented by an int, got float", t->d->name, c->name);
			return false;
		}
	}
	zend_long n = by ? (Z_TYPE_P(by) == IS_LONG ? Z_LVAL_P(by) : 0) : 1;
	d->c = c;
	d->f = sign * (by ? (Z_TYPE_P(by) == IS_DOUBLE ? Z_DVAL_P(by) : (double)n) : 1.0);
	/* wraps at the column's width, as C's unsigned arithmetic; no signed overflow at ZEND_LONG_MIN */
	d->n = (zend_long)(sign > 0 ? (uint64_t)n : -(uint64_t)n);
	return true;
}

/* Adds d to the row image img. */
static void delta_apply(char *img, const delta *d)
{
	if (d->c->type == PGT_FLOAT) {
		double v;
		memcpy(&v, img + d->c->offset, 8);
		v += d->f;
		memcpy(img + d->c->offset, &v, 8);
	} else {
		int_put(img, d->c, (int64_t)((uint64_t)int_at(img, d->c) + (uint64_t)d->n));
	}
}

/* incr and decr: add to one int or float column (incr($key, $column, $by = 1): the new value), or
 * to several of one row at once (incr($key, [$column => $by, ...]): the new values by column),
 * creating the row (zeros) when missing. Every column is checked before the lock is taken, and
 * the row changes under one lock and one journal entry: all of it or, after a crash, none. */
static void add(INTERNAL_FUNCTION_PARAMETERS, int sign)
{
	zval *key, *by = NULL, *v;
	zend_string *column = NULL, *name;
	HashTable *columns = NULL;
	ZEND_PARSE_PARAMETERS_START(2, 3)
		Z_PARAM_ZVAL(key)
		Z_PARAM_ARRAY_HT_OR_STR(columns, column)
		Z_PARAM_OPTIONAL
		Z_PARAM_NUMBER(by)
	ZEND_PARSE_PARAMETERS_END();
	tbl t = THIS_TBL();
	key_t_ k;
	if (!key_arg(&t, key, &k))
		RETURN_THROWS();
	delta ds[PGT_MAX_COLUMNS];
	uint32_t nd = 0;
	uint64_t mask = 0;
	bool indexed = false;
	if (column) {
		if (!delta_arg(&t, ZSTR_VAL(column), ZSTR_LEN(column), by, sign, &ds[0]))
			RETURN_THROWS();
		nd = 1;
	} else {
		if (by) {
			table_error("table %s: incr and decr with an array of columns take no third argument: the array says what to add", t.d->name);
			RETURN_THROWS();
		}
		if (zend_hash_num_elements(columns) == 0) {
			table_error("table %s: incr and decr need at least one column", t.d->name);
			RETURN_THROWS();
		}
		ZEND_HASH_FOREACH_STR_KEY_VAL(columns, name, v) {
			if (!name) {
				table_error("table %s: incr and decr take an array of column names to amounts, got an integer key", t.d->name);
				RETURN_THROWS();
			}
			if (!delta_arg(&t, ZSTR_VAL(name), ZSTR_LEN(name), v, sign, &ds[nd]))
				RETURN_THROWS();
			nd++; /* at most ncols: the names are distinct columns */
		} ZEND_HASH_FOREACH_END();
	}
	for (uint32_t j = 0; j < nd; j++) {
		mask |= 1ull << (ds[j].c - t.d->cols);
		indexed |= ds[j].c->index >= 0;
	}
	ROW_BUF(t, img);

	lock(&t);
	bool new;
	uint32_t i = find_or_insert(&t, &k, &new);
	if (i) {
		char *r = row_at(&t, i);
		memcpy(img, r, t.d->stride);
		for (uint32_t j = 0; j < nd; j++)
			delta_apply(img, &ds[j]);
		if (nd == 1 && !indexed && !new) { /* the common counter: journal the column only */
			const struct pgt_column *c = ds[0].c;
			save(&t, r + c->offset, (uint32_t)c->size);
			memcpy(r + c->offset, img + c->offset, c->size);
		} else {
			write_columns(&t, i, img, mask, new);
		}
	}
	unlock(&t);
	if (!i) {
		ROW_FREE(img);
		table_full(&t);
		RETURN_THROWS();
	}
	if (column) {
		column_zval(img, ds[0].c, return_value);
	} else {
		array_init_size(return_value, nd);
		for (uint32_t j = 0; j < nd; j++) {
			zval nv;
			column_zval(img, ds[j].c, &nv);
			zend_hash_str_add_new(Z_ARRVAL_P(return_value), ds[j].c->name, strnlen(ds[j].c->name, sizeof ds[j].c->name), &nv);
		}
	}
	ROW_FREE(img);
}

PHP_METHOD(Peregrine_Table, incr) { add(INTERNAL_FUNCTION_PARAM_PASSTHRU, 1); }
PHP_METHOD(Peregrine_Table, decr) { add(INTERNAL_FUNCTION_PARAM_PASSTHRU, -1); }

/* Whether column c holds the same value in the row images a and b: bytes for ints and strings
 * (value_put zero-fills a string's tail, as a new row is), == for floats. */
static bool same_value(const char *a, const char *b, const struct pgt_column *c)
{
	if (c->type == PGT_FLOAT) {
		double x, y;
		memcpy(&x, a + c->offset, 8);
		memcpy(&y, b + c->offset, 8);
		return x == y;
	}
	return memcmp(a + c->offset, b + c->offset, value_size(c)) == 0;
}

/* cas($key, $column, $old, $new): sets the column to new only if it holds old now, under the
 * lock; a missing row counts as zeros (as for incr) and is created only when old matches. Both
 * values are checked against the column first, as set() checks them. */
PHP_METHOD(Peregrine_Table, cas)
{
	zval *key, *old, *nv;
	zend_string *column;
	ZEND_PARSE_PARAMETERS_START(4, 4)
		Z_PARAM_ZVAL(key)
		Z_PARAM_STR(column)
		Z_PARAM_ZVAL(old)
		Z_PARAM_ZVAL(nv)
	ZEND_PARSE_PARAMETERS_END();
	tbl t = THIS_TBL();
	key_t_ k;
	if (!key_arg(&t, key, &k))
		RETURN_THROWS();
	const struct pgt_column *c = column_named(&t, ZSTR_VAL(column), ZSTR_LEN(column));
	if (!c) {
		table_error("table %s has no column %s", t.d->name, ZSTR_VAL(column));
		RETURN_THROWS();
	}
	ROW_BUF(t, want);
	ROW_BUF(t, next);
	ROW_BUF(t, img);
	bool ok = value_put(&t, want, c, old) && value_put(&t, next, c, nv);

	bool swapped = false, new = false;
	uint32_t i = 0;
	if (ok) {
		lock(&t);
		if ((i = find(&t, &k, NULL))) {
			memcpy(img, row_at(&t, i), t.d->stride);
			swapped = same_value(img, want, c);
		} else {
			memset(img + c->offset, 0, value_size(c)); /* the column of a row at zeros */
			if ((swapped = same_value(img, want, c))) {
				i = insert(&t, &k);
				new = true;
				swapped = i != 0;
				if (i)
					memcpy(img, row_at(&t, i), t.d->stride);
			}
		}
		if (swapped) {
			memcpy(img + c->offset, next + c->offset, value_size(c));
			write_columns(&t, i, img, 1ull << (c - t.d->cols), new);
		}
		unlock(&t);
	}
	ROW_FREE(want);
	ROW_FREE(next);
	ROW_FREE(img);
	if (!ok)
		RETURN_THROWS();
	if (new && !i) {
		table_full(&t);
		RETURN_THROWS();
	}
	RETURN_BOOL(swapped);
}

PHP_METHOD(Peregrine_Table, count)
{
	ZEND_PARSE_PARAMETERS_NONE();
	tbl t = THIS_TBL();
	RETURN_LONG(__atomic_load_n(&t.st->count, __ATOMIC_RELAXED));
}

PHP_METHOD(Peregrine_Table, capacity)
{
	ZEND_PARSE_PARAMETERS_NONE();
	tbl t = THIS_TBL();
	RETURN_LONG(t.d->capacity);
}

PHP_METHOD(Peregrine_Table, name)
{
	ZEND_PARSE_PARAMETERS_NONE();
	tbl t = THIS_TBL();
	RETURN_STRING(t.d->name);
}

/* How many lock-free copies where() tries before it takes the lock for one walk. */
#define WHERE_TRIES 3

/* Copies the rows of c's index chain that hold value into buf, as many as fit in cap, and
 * returns how many there are; without the lock (locked false), SIZE_MAX when a write moved the
 * sequence s during the walk. Bounded: every row number is checked and the walk stops after
 * capacity steps. */
static size_t chain_copy(const tbl *t, const struct pgt_column *c, int64_t value, char *buf, size_t cap, bool locked, uint32_t s)
{
	uint32_t i = __atomic_load_n(ibucket(t, c->index, value_bucket(t, value)), __ATOMIC_RELAXED);
	size_t n = 0;
	for (uint32_t steps = 0; i != 0 && i <= t->d->capacity && steps <= t->d->capacity; steps++) {
		char *r = row_at(t, i);
		if (!locked && (steps & 255) == 255 && __atomic_load_n(&t->st->seq, __ATOMIC_RELAXED) != s)
			return SIZE_MAX; /* a write moved the chain: stop rather than copy what may repeat */
		if (*used(t, r) && int_at(r, c) == value) {
			if (n < cap)
				memcpy(buf + n * t->d->stride, r, t->d->stride);
			n++;
		}
		i = *inext(t, r, c->index);
	}
	return n;
}

/* where(column, value): the rows whose indexed column holds value, as key => row, one
 * consistent moment of the table. The chain is copied without the lock while no write lands
 * during the copy; after WHERE_TRIES copies that a write spoiled, the lock is held for one walk,
 * so that writers, however many, cannot starve the reader. The lock is held only to copy: the
 * buffer grows outside it (no allocation under the lock), and a walk that found more rows than
 * fit is done again with room for half as many again, which bounds the walks. */
PHP_METHOD(Peregrine_Table, where)
{
	zend_string *column;
	zend_long value;
	ZEND_PARSE_PARAMETERS_START(2, 2)
		Z_PARAM_STR(column)
		Z_PARAM_LONG(value)
	ZEND_PARSE_PARAMETERS_END();
	tbl t = THIS_TBL();
	const struct pgt_column *c = column_named(&t, ZSTR_VAL(column), ZSTR_LEN(column));
	if (!c) {
		table_error("table %s has no column %s", t.d->name, ZSTR_VAL(column));
		RETURN_THROWS();
	}
	if (c->index < 0) {
		table_error("table %s, column %s has no index: list it under tables.define.%s.indexes", t.d->name, c->name, t.d->name);
		RETURN_THROWS();
	}
	size_t cap = 16, n;
	char *buf = emalloc(cap * t.d->stride);
	for (int tries = 0;; tries++) {
		if (tries < WHERE_TRIES) {
			uint32_t s = read_begin(&t);
			n = chain_copy(&t, c, value, buf, cap, false, s);
			if (read_retry(&t, s) || n == SIZE_MAX) /* SIZE_MAX: seq moved, counted by read_retry */
				continue; /* spoiled by a write: what n says may be wrong */
		} else {
			acquire(&t);
			n = chain_copy(&t, c, value, buf, cap, true, 0);
			release(&t);
		}
		if (n <= cap)
			break;
		cap = n + n / 2;
		buf = erealloc(buf, cap * t.d->stride);
	}
	array_init_size(return_value, (uint32_t)n);
	for (size_t j = n; j-- > 0;) { /* the chain is newest first: give them oldest first */
		zval k, row;
		key_zval(&t, buf + j * t.d->stride, &k);
		row_zval(&t, buf + j * t.d->stride, &row);
		array_set_zval_key(Z_ARRVAL_P(return_value), &k, &row);
		zval_ptr_dtor(&k);
		zval_ptr_dtor(&row);
	}
	efree(buf);
}

/* ---- iteration: foreach ($table as $key => $row), row by row, each row consistent ---- */

typedef struct {
	zend_object_iterator it;
	uint32_t pos; /* the row number of current, 0 before the first */
	zval key, row;
} table_iter;

/* Moves to the first used row after pos, copying it. */
static void iter_seek(table_iter *ti, uint32_t from)
{
	tbl t = tbl_of(obj_of(Z_OBJ(ti->it.data))->d);
	zval_ptr_dtor(&ti->key);
	zval_ptr_dtor(&ti->row);
	ZVAL_UNDEF(&ti->key);
	ZVAL_UNDEF(&ti->row);
	ROW_BUF(t, buf);
	for (uint32_t i = from; i <= t.d->capacity; i++) {
		if (i > __atomic_load_n(&t.st->hwm, __ATOMIC_RELAXED))
			break;
		bool in_use;
		for (;;) {
			uint32_t s = read_begin(&t);
			memcpy(buf, row_at(&t, i), t.d->stride);
			if (!read_retry(&t, s))
				break;
		}
		in_use = *used(&t, buf);
		if (in_use) {
			ti->pos = i;
			key_zval(&t, buf, &ti->key);
			row_zval(&t, buf, &ti->row);
			ROW_FREE(buf);
			return;
		}
	}
	ti->pos = 0;
	ROW_FREE(buf);
}

static void iter_dtor(zend_object_iterator *it)
{
	table_iter *ti = (table_iter *)it;
	zval_ptr_dtor(&ti->key);
	zval_ptr_dtor(&ti->row);
	zval_ptr_dtor(&it->data);
}

static int iter_valid(zend_object_iterator *it) { return ((table_iter *)it)->pos ? SUCCESS : FAILURE; }
static zval *iter_current(zend_object_iterator *it) { return &((table_iter *)it)->row; }
static void iter_key(zend_object_iterator *it, zval *key) { ZVAL_COPY(key, &((table_iter *)it)->key); }
static void iter_next(zend_object_iterator *it) { iter_seek((table_iter *)it, ((table_iter *)it)->pos + 1); }
static void iter_rewind(zend_object_iterator *it) { iter_seek((table_iter *)it, 1); }

static const zend_object_iterator_funcs iter_funcs = {
	iter_dtor, iter_valid, iter_current, iter_key, iter_next, iter_rewind, NULL, NULL,
};

static zend_object_iterator *table_iterator(zend_class_entry *ce, zval *object, int by_ref)
{
	(void)ce;
	if (by_ref) {
		zend_throw_error(NULL, "Peregrine\\Table cannot be iterated by reference");
		return NULL;
	}
	table_iter *ti = ecalloc(1, sizeof *ti);
	zend_iterator_init(&ti->it);
	ZVAL_OBJ_COPY(&ti->it.data, Z_OBJ_P(object));
	ti->it.funcs = &iter_funcs;
	ZVAL_UNDEF(&ti->key);
	ZVAL_UNDEF(&ti->row);
	return &ti->it;
}

PHP_METHOD(Peregrine_Table, getIterator)
{
	ZEND_PARSE_PARAMETERS_NONE();
	zend_create_internal_iterator_zval(return_value, ZEND_THIS);
}

/* ---- registration ---- */

ZEND_BEGIN_ARG_INFO_EX(arginfo_construct, 0, 0, 0)
ZEND_END_ARG_INFO()
ZEND_BEGIN_ARG_WITH_RETURN_OBJ_INFO_EX(arginfo_open, 0, 1, Peregrine\\Table, 0)
	ZEND_ARG_TYPE_INFO(0, name, IS_STRING, 0)
ZEND_END_ARG_INFO()
ZEND_BEGIN_ARG_WITH_RETURN_TYPE_MASK_EX(arginfo_get, 0, 1, MAY_BE_ARRAY | MAY_BE_LONG | MAY_BE_DOUBLE | MAY_BE_STRING | MAY_BE_NULL)
	ZEND_ARG_TYPE_MASK(0, key, MAY_BE_LONG | MAY_BE_STRING, NULL)
	ZEND_ARG_TYPE_INFO_WITH_DEFAULT_VALUE(0, column, IS_STRING, 1, "null")
ZEND_END_ARG_INFO()
ZEND_BEGIN_ARG_WITH_RETURN_TYPE_INFO_EX(arginfo_exists, 0, 1, _IS_BOOL, 0)
	ZEND_ARG_TYPE_MASK(0, key, MAY_BE_LONG | MAY_BE_STRING, NULL)
ZEND_END_ARG_INFO()
ZEND_BEGIN_ARG_WITH_RETURN_TYPE_INFO_EX(arginfo_set, 0, 2, IS_VOID, 0)
	ZEND_ARG_TYPE_MASK(0, key, MAY_BE_LONG | MAY_BE_STRING, NULL)
	ZEND_ARG_TYPE_INFO(0, row, IS_ARRAY, 0)
ZEND_END_ARG_INFO()
ZEND_BEGIN_ARG_WITH_RETURN_TYPE_MASK_EX(arginfo_incr, 0, 2, MAY_BE_LONG | MAY_BE_DOUBLE | MAY_BE_ARRAY)
	ZEND_ARG_TYPE_MASK(0, key, MAY_BE_LONG | MAY_BE_STRING, NULL)
	ZEND_ARG_TYPE_MASK(0, column, MAY_BE_STRING | MAY_BE_ARRAY, NULL)
	ZEND_ARG_TYPE_MASK(0, by, MAY_BE_LONG | MAY_BE_DOUBLE, "1")
ZEND_END_ARG_INFO()
ZEND_BEGIN_ARG_WITH_RETURN_TYPE_INFO_EX(arginfo_cas, 0, 4, _IS_BOOL, 0)
	ZEND_ARG_TYPE_MASK(0, key, MAY_BE_LONG | MAY_BE_STRING, NULL)
	ZEND_ARG_TYPE_INFO(0, column, IS_STRING, 0)
	ZEND_ARG_TYPE_MASK(0, old, MAY_BE_LONG | MAY_BE_DOUBLE | MAY_BE_STRING, NULL)
	ZEND_ARG_TYPE_MASK(0, new, MAY_BE_LONG | MAY_BE_DOUBLE | MAY_BE_STRING, NULL)
ZEND_END_ARG_INFO()
ZEND_BEGIN_ARG_WITH_RETURN_TYPE_INFO_EX(arginfo_long, 0, 0, IS_LONG, 0)
ZEND_END_ARG_INFO()
ZEND_BEGIN_ARG_WITH_RETURN_TYPE_INFO_EX(arginfo_name, 0, 0, IS_STRING, 0)
ZEND_END_ARG_INFO()
ZEND_BEGIN_ARG_WITH_RETURN_TYPE_INFO_EX(arginfo_where, 0, 2, IS_ARRAY, 0)
	ZEND_ARG_TYPE_INFO(0, column, IS_STRING, 0)
	ZEND_ARG_TYPE_INFO(0, value, IS_LONG, 0)
ZEND_END_ARG_INFO()
ZEND_BEGIN_ARG_WITH_RETURN_OBJ_INFO_EX(arginfo_iterator, 0, 0, Iterator, 0)
ZEND_END_ARG_INFO()

static const zend_function_entry table_methods[] = {
	PHP_ME(Peregrine_Table, __construct, arginfo_construct, ZEND_ACC_PRIVATE)
	PHP_ME(Peregrine_Table, open, arginfo_open, ZEND_ACC_PUBLIC | ZEND_ACC_STATIC)
	PHP_ME(Peregrine_Table, get, arginfo_get, ZEND_ACC_PUBLIC)
	PHP_ME(Peregrine_Table, exists, arginfo_exists, ZEND_ACC_PUBLIC)
	PHP_ME(Peregrine_Table, set, arginfo_set, ZEND_ACC_PUBLIC)
	PHP_ME(Peregrine_Table, del, arginfo_exists, ZEND_ACC_PUBLIC)
	PHP_ME(Peregrine_Table, incr, arginfo_incr, ZEND_ACC_PUBLIC)
	PHP_ME(Peregrine_Table, decr, arginfo_incr, ZEND_ACC_PUBLIC)
	PHP_ME(Peregrine_Table, cas, arginfo_cas, ZEND_ACC_PUBLIC)
	PHP_ME(Peregrine_Table, count, arginfo_long, ZEND_ACC_PUBLIC)
	PHP_ME(Peregrine_Table, capacity, arginfo_long, ZEND_ACC_PUBLIC)
	PHP_ME(Peregrine_Table, name, arginfo_name, ZEND_ACC_PUBLIC)
	PHP_ME(Peregrine_Table, where, arginfo_where, ZEND_ACC_PUBLIC)
	PHP_ME(Peregrine_Table, getIterator, arginfo_iterator, ZEND_ACC_PUBLIC)
	PHP_FE_END
};

static PHP_MINIT_FUNCTION(peregrine_table)
{
	zend_class_entry ce;
	(void)type;
	(void)module_number;

	INIT_CLASS_ENTRY(ce, "Peregrine\\TableException", NULL);
	table_exception_ce = zend_register_internal_class_ex(&ce, spl_ce_RuntimeException);
	table_exception_ce->ce_flags |= ZEND_ACC_FINAL;

	INIT_CLASS_ENTRY(ce, "Peregrine\\Table", table_methods);
	table_ce = zend_register_internal_class_ex(&ce, NULL);
	table_ce->ce_flags |= ZEND_ACC_FINAL | ZEND_ACC_NOT_SERIALIZABLE;
	table_ce->create_object = table_new;
	zend_class_implements(table_ce, 2, zend_ce_aggregate, zend_ce_countable);
	table_ce->get_iterator = table_iterator;
	memcpy(&table_handlers, zend_get_std_object_handlers(), sizeof table_handlers);
	table_handlers.offset = XtOffsetOf(table_obj, std);
	table_handlers.clone_obj = NULL;
	return SUCCESS;
}

zend_module_entry pg_table_module = {
	STANDARD_MODULE_HEADER,
	"peregrine_table",
	NULL,
	PHP_MINIT(peregrine_table),
	NULL, NULL, NULL, NULL,
	"0.1.0",
	STANDARD_MODULE_PROPERTIES,
};
