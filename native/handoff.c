/* handoff.c: in direct mode, a worker gives the server the connections that ask for a
 * WebSocket (docs/direct.md, "WebSockets"), whose hub holds them as it does in proxied mode,
 * so that no reset or crash of a worker drops one. Nothing else of direct mode is here.
 *
 * The message, on a new connection to the unix socket PEREGRINE_HANDOFF names (no variable:
 * no hub, PHP answers the upgrade as any request): the client's socket as SCM_RIGHTS with the
 * first bytes, then a 4-byte big-endian length and that many bytes, what the worker read of
 * the connection (the request's head and anything after it). Then the worker closes the unix
 * connection.
 *
 * Who owns the client's socket (internal/websocket/handoff.go is the other side):
 * - until the whole message is sent, the worker: if any step fails (no server, a refused
 *   connection, a short send) it answers 503 and closes; a copy the server may have received
 *   with a short message is closed there unread and unwritten.
 * - once it is sent, the server: the worker closes its copy at once (never shutdown(), which
 *   would end the server's copy too). A server that dies before reading it takes the copy in
 *   flight with it (the kernel closes it), and the client sees the connection close.
 * - a worker killed mid-message: its copy closes with it; the server reads a short message and
 *   closes its own. Either way no copy outlives both, and the client gets an answer or a close. */
#include "handoff.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

/* has_token reports whether the comma-separated list v[0, n) holds tok, case-insensitively. */
static bool has_token(const char *v, size_t n, const char *tok)
{
	size_t tl = strlen(tok);
	for (size_t i = 0; i < n;) {
		while (i < n && (v[i] == ' ' || v[i] == '\t' || v[i] == ','))
			i++;
		size_t s = i;
		while (i < n && v[i] != ',')
			i++;
		size_t e = i;
		while (e > s && (v[e - 1] == ' ' || v[e - 1] == '\t'))
			e--;
		if (e - s == tl && strncasecmp(v + s, tok, tl) == 0)
			return true;
	}
	return false;
}

/* wants_websocket reports whether the head (already parsed whole, so its lines end in CRLF)
 * has Connection: upgrade and Upgrade: websocket, as the server's own front asks (gorilla's
 * IsWebSocketUpgrade): the method and the other fields are the hub's to check. */
static bool wants_websocket(const char *buf, size_t head)
{
	bool conn = false, up = false;
	const char *p = memchr(buf, '\n', head), *end = buf + head;
	while (p != NULL && ++p < end) {
		const char *eol = memchr(p, '\n', (size_t)(end - p));
		if (eol == NULL)
			break;
		const char *colon = memchr(p, ':', (size_t)(eol - p));
		if (colon != NULL) {
			size_t nl = (size_t)(colon - p), vl = (size_t)(eol - colon - 1);
			if (vl > 0 && colon[vl] == '\r')
				vl--;
			if (nl == 10 && strncasecmp(p, "connection", 10) == 0)
				conn = conn || has_token(colon + 1, vl, "upgrade");
			else if (nl == 7 && strncasecmp(p, "upgrade", 7) == 0)
				up = up || has_token(colon + 1, vl, "websocket");
		}
		p = eol;
	}
	return conn && up;
}

/* send_message sends the fd and the framed bytes on s; false if any of it did not go. */
static bool send_message(int s, int fd, const char *buf, size_t len)
{
	uint32_t n = htonl((uint32_t)len);
	struct iovec iov[2] = {{&n, 4}, {(char *)buf, len}};
	union {
		char b[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} ctl;
	struct msghdr m = {.msg_iov = iov, .msg_iovlen = 2, .msg_control = ctl.b, .msg_controllen = sizeof(ctl.b)};
	struct cmsghdr *cm = CMSG_FIRSTHDR(&m);
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(cm), &fd, sizeof(int));
	size_t total = 4 + len, sent = 0;
	ssize_t w = sendmsg(s, &m, MSG_NOSIGNAL);
	if (w <= 0)
		return false;
	for (sent = (size_t)w; sent < total; sent += (size_t)w) {
		const char *from = sent < 4 ? (const char *)&n + sent : buf + (sent - 4);
		size_t left = sent < 4 ? 4 - sent : total - sent;
		w = send(s, from, left, MSG_NOSIGNAL);
		if (w <= 0)
			return false;
	}
	return true;
}

static const char *handoff_path(void)
{
	static const char *path;
	static bool looked;
	if (!looked) {
		path = getenv("PEREGRINE_HANDOFF");
		looked = true;
	}
	return path;
}

bool pg_handoff_wanted(const char *buf, size_t head)
{
	const char *path = handoff_path();
	return path != NULL && *path != '\0' && wants_websocket(buf, head);
}

enum pg_handoff_result pg_handoff(int fd, const char *buf, size_t head, size_t len)
{
	const char *path = handoff_path();
	if (!pg_handoff_wanted(buf, head))
		return PG_HANDOFF_NONE;
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	if (strlen(path) >= sizeof(sa.sun_path) || len > UINT32_MAX - 4)
		return PG_HANDOFF_FAILED;
	memcpy(sa.sun_path, path, strlen(path));
	int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (s < 0)
		return PG_HANDOFF_FAILED;
	/* Blocking, bounded: the server reads at once; a server that does not is as good as gone. */
	struct timeval tv = {.tv_sec = 2};
	setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	bool ok = connect(s, (struct sockaddr *)&sa, sizeof(sa)) == 0 && send_message(s, fd, buf, len);
	close(s);
	return ok ? PG_HANDOFF_DONE : PG_HANDOFF_FAILED;
}
