/* table.h: the shared tables' segment as internal/tables/layout.go lays it out (docs/tables.md),
 * and the module that registers Peregrine\Table and Peregrine\TableException.
 *
 * The daemon creates the segment before any worker; a process maps it on its first
 * Table::open, from the path in PEREGRINE_TABLES. Every integer is little-endian, as the machine. */
#ifndef PEREGRINE_TABLE_H
#define PEREGRINE_TABLE_H

#include <stdint.h>

#include "php.h"

#define PGT_MAGIC "PGTABLES"
#define PGT_VERSION 1
#define PGT_MAX_COLUMNS 32
#define PGT_MAX_INDEXES 8

enum pgt_type { PGT_INT8 = 1, PGT_INT16, PGT_INT32, PGT_INT64, PGT_FLOAT, PGT_STRING };
enum pgt_key { PGT_KEY_INT = 1, PGT_KEY_STRING = 2 };

struct pgt_header {
	char magic[8];
	uint32_t version, ntables;
	uint64_t size;
	uint32_t pid;
	uint8_t pad[36];
};

struct pgt_column {
	char name[32];
	uint32_t type, size, offset; /* size: of the value, N for string(N); offset in the row */
	int32_t index;               /* the index on this column, or -1 */
};

struct pgt_desc {
	char name[64];
	uint32_t key_kind, key_size, capacity, nbuckets, stride, ncols, nindexes, key_off;
	uint32_t hnext_off, inext_off, used_off, journal_cap;
	uint64_t state_off, rows_off, buckets_off, ibuckets_off, bytes;
	uint8_t pad[40];
	struct pgt_column cols[PGT_MAX_COLUMNS];
	uint8_t pad2[320];
};

/* A table's state block. The lock holds its owner's pid; seq is odd while a write is under way;
 * the journal holds jn entries (u64 offset in the segment, u32 length, u32 pad, the old bytes
 * padded to 8) that undo the write under way, in reverse. read_retries counts the lock-free
 * reads that a write spoiled and that started again (peregrine tables shows it). Row numbers
 * start at 1; 0 is none. */
struct pgt_state {
	uint32_t lock, seq, count, hwm, free_head, jn, jused, pad;
	uint64_t read_retries;
	uint8_t pad2[24];
	uint8_t journal[];
};

_Static_assert(sizeof(struct pgt_header) == 64, "header");
_Static_assert(sizeof(struct pgt_column) == 48, "column");
_Static_assert(sizeof(struct pgt_desc) == 2048, "descriptor");
_Static_assert(sizeof(struct pgt_state) == 64, "state");

/* Registers the classes at module startup: give it to php_module_startup(). */
extern zend_module_entry pg_table_module;

#endif
