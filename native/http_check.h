/* http_check.h: what the parser's tests check it against (fuzz_http.c, http_driver.c). */
#ifndef PEREGRINE_HTTP_CHECK_H
#define PEREGRINE_HTTP_CHECK_H

#include <stddef.h>

/* head_complete reports whether p holds a whole head, seen the simplest way: after up to four
 * empty lines, a line, then an empty line. The parser must never ask for more bytes then. */
static inline int head_complete(const char *p, size_t len)
{
	size_t i = 0;
	for (int e = 0; e < 4; e++) {
		if (i < len && p[i] == '\n')
			i++;
		else if (i + 1 < len && p[i] == '\r' && p[i + 1] == '\n')
			i += 2;
		else
			break;
	}
	for (; i < len; i++)
		if (p[i] == '\n' && ((i + 1 < len && p[i + 1] == '\n') ||
				     (i + 2 < len && p[i + 1] == '\r' && p[i + 2] == '\n')))
			return 1;
	return 0;
}

#endif
