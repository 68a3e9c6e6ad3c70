/* handoff.h: direct mode gives the server the connections that ask for a WebSocket (handoff.c). */
#ifndef PEREGRINE_HANDOFF_H
#define PEREGRINE_HANDOFF_H

#include <stdbool.h>
#include <stddef.h>

enum pg_handoff_result {
	PG_HANDOFF_NONE,   /* not a WebSocket upgrade, or no server to take it: PHP answers */
	PG_HANDOFF_DONE,   /* the server holds the connection: forget it (close this copy) */
	PG_HANDOFF_FAILED, /* the server did not take it: answer 503 on this copy and close */
};

/* pg_handoff_wanted says whether pg_handoff would give the connection away: the request head
 * buf[0, head) asks for a WebSocket and the server takes them. */
bool pg_handoff_wanted(const char *buf, size_t head);

/* pg_handoff gives the server the connection fd if the request head buf[0, head) asks for a
 * WebSocket, with the len bytes read from it (the head and what followed). */
enum pg_handoff_result pg_handoff(int fd, const char *buf, size_t head, size_t len);

#endif
