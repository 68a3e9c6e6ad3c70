/* direct.c: direct mode (docs/direct.md): the worker accepts HTTP/1.1 connections on a
 * listening socket the server gave it, reads requests with http_parse.c and answers them
 * itself; the server only starts, supervises and stops it.
 *
 * With workers.concurrency above 1, PHP's fiber loop drives this loop instead ("fibers", at the
 * end of this file). Otherwise one request runs at a time. Between requests the worker waits in
 * epoll for whatever comes first: a connection, bytes on one, a deadline, or a word from the
 * server on fd 3 (STOP, or its end). A request is read whole, head and body, before PHP sees
 * it, so PHP reads its body from memory and a slow client costs nothing while PHP runs; but
 * while PHP runs, the worker's other connections wait (docs/direct.md says what that costs).
 *
 * A connection's states:
 *
 *	accept ──▶ HEAD ──head read──▶ BODY ──body read──▶ READY ──its turn──▶ BUSY
 *	            ▲ │ bad head: 4xx          │ too large: 413                    │ answered
 *	            │ ▼                        ▼                                  │
 *	            │ LINGER ◀─────────────────┴──────── Connection: close ◀──────┤
 *	            └──────────────── keep-alive (what follows is parsed at once) ┘
 *
 * LINGER has answered and shut its side down; it reads and drops what the client still sends
 * until the client closes (or a short deadline), so that closing never resets a connection
 * whose answer the client has not read yet.
 *
 * Draining (STOP or end of fd 3, or workers.max_jobs reached): the worker closes its copy of
 * the listening socket (the other workers go on accepting on theirs), closes the connections
 * that have not begun a request, finishes the others with Connection: close, and then ends
 * peregrine_handle_request()'s loop. */
#include "peregrine.h"
#include "http_parse.h"
#include "handoff.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/timerfd.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define FD_CTL 3

enum { C_HEAD, C_BODY, C_READY, C_BUSY, C_LINGER };

/* Fibers: what a connection may hold of answers its client has not taken yet before the fiber
 * writing to it waits (peregrine_direct_full(), Async\Internal\Server::room()): a streamed
 * answer's next part, a large whole answer's end, and the connection's next request wait for
 * room. PHP hands a tick's frames over in one write, faster than any client reads, so a cap
 * that broke the connection would break answers that are merely large: the writer waits
 * instead, up to write_timeout. A streamed answer adds at most a part past it. Large enough
 * that a client that reads finds the next bytes here while PHP makes more (the socket's own
 * buffer holds as much again), small enough that a thousand connections at the cap hold a
 * quarter of a GiB (docs/direct.md, "What is held for a client that does not read"). */
#define HELD_CAP (256u << 10)

struct conn {
	int fd;
	int state;
	char *in;                 /* bytes received and not yet used */
	size_t in_len, in_cap;
	bool more;                /* the socket may hold bytes not read yet (the buffer was full) */
	bool eof;                 /* the client shut its side */
	struct ph_request req;
	char *head;               /* the REQUEST-format head (decode.h) of the request being read */
	size_t head_len;
	char *body;
	size_t body_len, body_cap;
	uint64_t want;            /* Content-Length bytes still to come */
	struct ph_chunked ch;
	bool chunked, keep_alive, is_head, http10;
	bool after_post;          /* the request read last was a POST: a stray CRLF may follow */
	bool safe;                /* the request read last is a GET or HEAD: its answer may be held */
	bool asterisk;            /* OPTIONS *: the worker answers it, no script runs */
	double deadline;          /* CLOCK_MONOTONIC seconds; 0: none */
	bool broken;              /* a write failed: the answer is dropped, the connection closes */
	bool close_after;         /* this answer ends the connection */
	bool chunked_out;         /* the answer streams in chunks */
	bool head_started;        /* the head's first byte came: head_timeout runs */
	bool used;                /* a request came on it: idle now means kept alive */
	double accepted;          /* when it was accepted (CLOCK_MONOTONIC seconds) */
	char *held;               /* whole answers held back to go out with the next one (send_all) */
	size_t held_len, held_cap;
	unsigned held_n;          /* how many answers are held */
	bool run_next;            /* its answers are held: its next request goes first in the queue */
	bool dead;                /* dropped: freed once the events that may name it are handled */
	char raddr[INET6_ADDRSTRLEN], laddr[INET6_ADDRSTRLEN];
	char rport[8], lport[8];
	size_t raddr_len, laddr_len, rport_len, lport_len;
	/* Fibers (workers.concurrency > 1): the request in flight on this connection. */
	uint32_t id;              /* its REQUEST's id */
	double began;             /* when it began (CLOCK_MONOTONIC seconds) */
	bool started;             /* its answer's head went out */
	bool cancelled;           /* CANCEL went to PHP: what PHP still answers is dropped */
	bool gone;                /* the socket is closed; kept until PHP's DONE for the request */
	bool shut_pending;        /* LINGER once the held bytes are written */
	bool out_watched;         /* EPOLLOUT is on */
	bool want_room;           /* its request's fiber waits for held_len to fall below HELD_CAP */
	bool parked;              /* READY, but not queued while it holds HELD_CAP: queued once it drains */
	double wdeadline;         /* the held bytes must be written by then */
	double waiting_since;     /* when its fiber began to wait for room: not the script's run time */
	struct conn *prev, *next; /* every connection */
	struct conn *ready_next;  /* the FIFO of READY connections */
};

static struct {
	bool on;
	int lfd, ep;
	bool draining;
	struct conn *conns, *ready, *ready_tail, *cur;
	struct conn *dead;        /* dropped during this batch of events, linked by next */
	size_t nconns;
	size_t body_pos;          /* what PHP read of cur's body */
	uint64_t served, max_jobs;
	uint64_t max_memory;      /* RSS in bytes past which the worker drains after a request; 0: off */
	int statm;                /* /proc/self/statm, open while max_memory is on */
	double exec_timeout;      /* seconds a request may run; 0: no limit */
	volatile sig_atomic_t timer_armed;
	double began;             /* when cur's request began (CLOCK_MONOTONIC seconds) */
	double now;               /* the clock as tick() last read it (loop time, below) */
	struct ph_limits lim;
	struct ph_field fields[1024];
	uint64_t max_body;
	double head_timeout, body_timeout, idle_timeout, write_timeout, fresh_grace, drain_grace;
	const char *document_root, *server_name;
	size_t document_root_len, server_name_len;
	uint32_t next_id;
	/* Fibers (workers.concurrency > 1, fibers below): PHP's request loop reads the REQUEST and
	 * CANCEL frames queued in rq and writes its frames, parsed from fin, in place of fds 3 and 4. */
	bool fibers;
	int kick, tfd;            /* eventfd: rq has frames or the end came; timerfd: next deadline */
	bool kicked;
	double timer_at, next_at; /* the timer's deadline; the next deadline expire() saw */
	char *rq, *fin;
	size_t rq_len, rq_cap, rq_pos, fin_len, fin_cap;
	uint64_t begun;
	size_t inflight, max_inflight; /* requests in PHP; workers.concurrency: no accepting beyond */
	bool listening;           /* the listening socket is in d.ep (listen_wanted) */
	size_t max_conns;         /* http.max_connections, this worker's share: no accepting beyond */
	double accept_paused;     /* accept() ran out of descriptors: no accepting until then */
	size_t max_cookies, max_input_vars; /* http.max_cookies, http.max_input_vars */
	uint32_t *drained;        /* requests whose fiber waited for room and may write again */
	size_t drained_len, drained_cap;
} d;

/* A worker's counters, in the file the daemon shares with every worker (PEREGRINE_DIRECT_STATS):
 * one row a worker, claimed by its pid; the daemon reads them for `peregrine workers`, its
 * metrics and its exec_timeout backstop. The layout is internal/daemon/direct.go's directRow.
 * This process is the row's only writer. A row's counts go on from the processes that had it
 * before (so that their sum over the rows never goes back); base_requests says where this
 * process's own count began. */
#define LATENCY_BUCKETS 12 /* < 1, 2, 5, 10, 25, 50, 100, 250, 500 ms, 1 s, 5 s, and more */
struct stats_row {
	uint32_t pid, pad;
	uint64_t requests, bytes_in, bytes_out;
	uint64_t status[5];                /* answers by class: 1xx to 5xx */
	uint64_t latency[LATENCY_BUCKETS]; /* requests by run time */
	uint64_t busy_since;               /* CLOCK_REALTIME ns when the running request began; 0: idle */
	uint64_t base_requests;            /* requests when this process claimed the row */
};
static struct stats_row no_stats, *stats = &no_stats;

static char ctl_marker, listen_marker, kick_marker, timer_marker; /* epoll data but connections */

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Loop time, as nginx keeps it: the clock is read once where the loop wakes (after epoll_wait)
 * and where it is entered from PHP (a request's start and end, the fibers' reads and writes),
 * and the deadlines set in between use that reading. A request cost ten clock reads before,
 * about 6% of its CPU in user space; the deadlines are seconds, and a reading is never older
 * than the events being handled. */
static double tick(void)
{
	return d.now = now();
}

/* PEREGRINE_DIRECT: "fd=N,max_head=N,..." (internal/daemon writes it; durations in ms). */
static void configure(const char *spec)
{
	d.lfd = -1;
	d.lim = (struct ph_limits){.max_head = 64 << 10, .max_fields = 100, .max_line = 8192};
	d.max_body = 8u << 20;
	d.head_timeout = d.idle_timeout = d.body_timeout = d.write_timeout = 60;
	d.fresh_grace = 1;
	d.drain_grace = 1;
	d.max_cookies = d.max_input_vars = 1000; /* as internal/httpserver's defaults */
	while (*spec) {
		const char *eq = strchr(spec, '='), *end = strchr(spec, ',');
		if (!end)
			end = spec + strlen(spec);
		if (!eq || eq > end)
			break;
		size_t klen = (size_t)(eq - spec);
		unsigned long long v = strtoull(eq + 1, NULL, 10);
#define KEY(k) (klen == sizeof(k) - 1 && memcmp(spec, k, klen) == 0)
		if (KEY("fd"))
			d.lfd = (int)v;
		else if (KEY("max_head"))
			d.lim.max_head = v;
		else if (KEY("max_fields"))
			d.lim.max_fields = v < 1024 ? v : 1024;
		else if (KEY("max_line"))
			d.lim.max_line = v;
		else if (KEY("max_body"))
			d.max_body = v;
		else if (KEY("head_timeout"))
			d.head_timeout = (double)v / 1000;
		else if (KEY("body_timeout"))
			d.body_timeout = (double)v / 1000;
		else if (KEY("idle_timeout"))
			d.idle_timeout = (double)v / 1000;
		else if (KEY("write_timeout"))
			d.write_timeout = (double)v / 1000;
		else if (KEY("fresh_grace"))
			d.fresh_grace = (double)v / 1000;
		else if (KEY("drain_grace"))
			d.drain_grace = (double)v / 1000;
		else if (KEY("max_jobs"))
			d.max_jobs = v;
		else if (KEY("max_memory"))
			d.max_memory = v;
		else if (KEY("exec_timeout"))
			d.exec_timeout = (double)v / 1000;
		else if (KEY("max_conns"))
			d.max_conns = v;
		else if (KEY("max_cookies"))
			d.max_cookies = v;
		else if (KEY("max_input_vars"))
			d.max_input_vars = v;
#undef KEY
		spec = *end ? end + 1 : end;
	}
	if (d.max_conns == 0) { /* as the front's default: 10000, or what the open-files limit leaves */
		struct rlimit rl;
		d.max_conns = 10000;
		if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < 10000 + 64)
			d.max_conns = rl.rlim_cur > 16 + 64 ? rl.rlim_cur - 64 : 16; /* 64 for PHP's own files */
	}
	d.document_root = getenv("PEREGRINE_DOCUMENT_ROOT");
	d.server_name = getenv("PEREGRINE_SERVER_NAME");
	d.document_root_len = d.document_root ? strlen(d.document_root) : 0;
	d.server_name_len = d.server_name ? strlen(d.server_name) : 0;
}

/* exec_timeout: ITIMER_REAL, armed at a request's start unless it was armed less than
 * TIMER_SLACK ago (and has not fired since), so that a stream of short requests costs about
 * one system call per TIMER_SLACK: a request's limit falls between exec_timeout less the slack
 * and exec_timeout, as worker.c does for PHP's own time limit. When it fires during a request,
 * the request gets 504 (if its answer has not begun) and the worker is killed, as the server
 * kills a worker past exec_timeout in proxied mode; when it fires between requests, nothing
 * happens. It never fires during a request that has time left, so PHP's sleeps and reads are
 * never interrupted early. Only async-signal-safe calls in the handler. */
#define TIMER_SLACK 0.1 /* seconds */

static const char timeout_answer[] = "HTTP/1.1 504 Gateway Timeout\r\nContent-Type: text/plain; charset=utf-8\r\n"
				     "Content-Length: 16\r\nConnection: close\r\n\r\nGateway Timeout\n";

static void on_alarm(int sig)
{
	(void)sig;
	d.timer_armed = 0;
	if (d.cur == NULL)
		return;
	static const char msg[] = "peregrine-php: a request exceeded workers.exec_timeout: answering 504, the worker is killed\n";
	if (write(2, msg, sizeof(msg) - 1) < 0) {
		/* nothing to do: the worker dies either way */
	}
	/* The answers held for this connection first (stable while this answer has not begun). */
	if (!pg.req.started && d.cur->held_len > 0 &&
	    send(d.cur->fd, d.cur->held, d.cur->held_len, MSG_NOSIGNAL | MSG_DONTWAIT) < 0) {
		/* the client left */
	}
	if (!pg.req.started && send(d.cur->fd, timeout_answer, sizeof(timeout_answer) - 1, MSG_NOSIGNAL | MSG_DONTWAIT) < 0) {
		/* the client left */
	}
	kill(getpid(), SIGKILL);
}

static void arm_exec_timeout(void)
{
	static double armed_at;
	if (d.exec_timeout <= 0)
		return;
	double t = d.began;
	if (d.timer_armed && t - armed_at < TIMER_SLACK)
		return;
	struct itimerval it = {.it_value = {(time_t)d.exec_timeout, (suseconds_t)((d.exec_timeout - (double)(time_t)d.exec_timeout) * 1e6)}};
	armed_at = t;
	d.timer_armed = 1;
	setitimer(ITIMER_REAL, &it, NULL);
}

/* over_memory reads the resident set size (pages) from /proc/self/statm. */
static bool over_memory(void)
{
	char buf[128];
	if (d.max_memory == 0 || d.statm < 0)
		return false;
	ssize_t n = pread(d.statm, buf, sizeof(buf) - 1, 0);
	if (n <= 0)
		return false;
	buf[n] = '\0';
	const char *sp = strchr(buf, ' ');
	uint64_t pages = sp ? strtoull(sp + 1, NULL, 10) : 0;
	return pages * (uint64_t)sysconf(_SC_PAGESIZE) > d.max_memory;
}

static uint64_t realtime_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* claim_stats maps the shared counters and takes a free row: one whose pid is 0, gone, or this
 * process's own (a pid used again). Without the file, the counters go to a private row. */
static void claim_stats(void)
{
	const char *path = getenv("PEREGRINE_DIRECT_STATS");
	struct stat st;
	if (path == NULL || *path == '\0')
		return;
	int fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &st) < 0 || (size_t)st.st_size < sizeof(struct stats_row)) {
		if (fd >= 0)
			close(fd);
		return;
	}
	struct stats_row *rows = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (rows == MAP_FAILED)
		return;
	uint32_t me = (uint32_t)getpid();
	for (size_t i = 0; i < (size_t)st.st_size / sizeof(*rows); i++) {
		uint32_t p = __atomic_load_n(&rows[i].pid, __ATOMIC_ACQUIRE);
		if (p != 0 && p != me && !(kill((pid_t)p, 0) < 0 && errno == ESRCH))
			continue;
		if (__atomic_compare_exchange_n(&rows[i].pid, &p, me, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
			__atomic_store_n(&rows[i].busy_since, 0, __ATOMIC_RELAXED);
			rows[i].base_requests = rows[i].requests;
			stats = &rows[i];
			return;
		}
	}
	fprintf(stderr, "peregrine-php: no free row in %s: this worker's counters are not shared\n", path);
}

static void count_latency(double seconds)
{
	static const double bounds[LATENCY_BUCKETS - 1] = {0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5};
	int i = 0;
	while (i < LATENCY_BUCKETS - 1 && seconds >= bounds[i])
		i++;
	stats->latency[i]++;
}

bool pg_direct_init(void)
{
	const char *spec = getenv("PEREGRINE_DIRECT");
	struct epoll_event ev = {.events = EPOLLIN};

	if (spec == NULL || *spec == '\0')
		return false;
	configure(spec);
	if (d.lfd < 0 || fcntl(d.lfd, F_GETFD) < 0) {
		fprintf(stderr, "peregrine-php: PEREGRINE_DIRECT names no listening socket\n");
		exit(PG_EXIT_PROTOCOL);
	}
	fcntl(d.lfd, F_SETFD, FD_CLOEXEC);
	fcntl(d.lfd, F_SETFL, fcntl(d.lfd, F_GETFL) | O_NONBLOCK);
	d.ep = epoll_create1(EPOLL_CLOEXEC);
	/* Level-triggered, and not EPOLLEXCLUSIVE: that wakes one epoll set per connection, which
	 * may be a worker busy in PHP or one about to drain and close its copy, and then a
	 * connection waits (forever, if no other comes) while the other workers sleep. Here every
	 * idle worker wakes and one wins the accept: a herd of a few processes. */
	ev.events = EPOLLIN;
	ev.data.ptr = &listen_marker;
	if (d.ep < 0 || epoll_ctl(d.ep, EPOLL_CTL_ADD, d.lfd, &ev) < 0) {
		fprintf(stderr, "peregrine-php: epoll: %s\n", strerror(errno));
		exit(PG_EXIT_PROTOCOL);
	}
	ev.events = EPOLLIN;
	ev.data.ptr = &ctl_marker;
	epoll_ctl(d.ep, EPOLL_CTL_ADD, FD_CTL, &ev);
	claim_stats();
	d.statm = d.max_memory ? open("/proc/self/statm", O_RDONLY | O_CLOEXEC) : -1;
	const char *conc = getenv("PEREGRINE_CONCURRENCY");
	d.fibers = conc && atoi(conc) > 1;
	d.listening = true;
	if (d.fibers) {
		d.max_inflight = (size_t)atoi(conc);
		/* PHP's loop waits on d.ep alone: the kick and the deadlines are in it too. */
		d.kick = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
		d.tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
		struct epoll_event k = {.events = EPOLLIN, .data.ptr = &kick_marker};
		struct epoll_event t = {.events = EPOLLIN, .data.ptr = &timer_marker};
		if (d.kick < 0 || d.tfd < 0 || epoll_ctl(d.ep, EPOLL_CTL_ADD, d.kick, &k) < 0 ||
		    epoll_ctl(d.ep, EPOLL_CTL_ADD, d.tfd, &t) < 0) {
			fprintf(stderr, "peregrine-php: eventfd/timerfd: %s\n", strerror(errno));
			exit(PG_EXIT_PROTOCOL);
		}
	} else if (d.exec_timeout > 0) {
		struct sigaction sa = {.sa_handler = on_alarm, .sa_flags = SA_RESTART};
		sigaction(SIGALRM, &sa, NULL);
	}
	fcntl(FD_CTL, F_SETFL, fcntl(FD_CTL, F_GETFL) | O_NONBLOCK);
	d.on = true;
	return true;
}

static void control(void);
static void next_request(struct conn *c);
static void answer_asterisk(struct conn *c);
static bool append(char **buf, size_t *len, size_t *cap, const char *s, size_t n);

/* ---- connections ---- */

static void cancel_request(struct conn *c);
static void unready(struct conn *c);
static void update_listening(void);

/* drop closes a connection. It is freed (bury) only once nothing refers to it: a request in
 * PHP (BUSY at concurrency > 1) keeps it until its DONE, and a READY one leaves the queue of
 * READY connections first (a write failing or passing write_timeout drops one there). */
static void drop(struct conn *c)
{
	if (c->fd >= 0) {
		epoll_ctl(d.ep, EPOLL_CTL_DEL, c->fd, NULL);
		close(c->fd);
		c->fd = -1;
	}
	if (d.fibers && c->state == C_BUSY) { /* freed at the request's DONE */
		c->gone = true;
		c->broken = true;
		c->held_len = 0;
		cancel_request(c);
		return;
	}
	if (c->state == C_READY)
		unready(c);
	if (c->prev)
		c->prev->next = c->next;
	else
		d.conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	d.nconns--;
	update_listening(); /* below the connection cap again */
	c->dead = true;
	c->next = d.dead;
	d.dead = c;
}

static void bury(void)
{
	for (struct conn *c = d.dead, *n; c; c = n) {
		n = c->next;
		free(c->in);
		free(c->head);
		free(c->body);
		free(c->held);
		free(c);
	}
	d.dead = NULL;
}

/* linger shuts the connection's sending side and drops what still comes until the client
 * closes, for at most a second. */
static void linger(struct conn *c)
{
	c->state = C_LINGER;
	c->in_len = 0;
	if (d.fibers && c->held_len > 0) { /* the answer is not all written yet: shut down after */
		c->shut_pending = true;
		c->deadline = d.now + d.write_timeout;
		return;
	}
	shutdown(c->fd, SHUT_WR);
	c->deadline = d.now + 1;
}

static void add_ready(struct conn *c)
{
	c->state = C_READY;
	c->deadline = 0;
	c->ready_next = NULL;
	if (d.fibers && c->held_len >= HELD_CAP) {
		/* Its client has not taken what it was answered: its next request waits until it has
		 * (room), or a pipelining client that reads nothing would be held every answer. */
		c->parked = true;
		return;
	}
	if (c->run_next && d.ready) { /* next_request: what it holds goes out with this answer */
		c->ready_next = d.ready;
		d.ready = c;
		return;
	}
	if (d.ready_tail)
		d.ready_tail->ready_next = c;
	else
		d.ready = c;
	d.ready_tail = c;
}

/* unready takes a connection out of the queue of READY connections. */
static void unready(struct conn *c)
{
	struct conn *prev = NULL;
	for (struct conn *r = d.ready; r; prev = r, r = r->ready_next) {
		if (r != c)
			continue;
		if (prev)
			prev->ready_next = c->ready_next;
		else
			d.ready = c->ready_next;
		if (d.ready_tail == c)
			d.ready_tail = prev;
		c->ready_next = NULL;
		return;
	}
}

static void sockaddr_text(const struct sockaddr_storage *sa, char *addr, char *port)
{
	if (sa->ss_family == AF_INET6) {
		const struct sockaddr_in6 *s6 = (const void *)sa;
		inet_ntop(AF_INET6, &s6->sin6_addr, addr, INET6_ADDRSTRLEN);
		snprintf(port, 8, "%u", ntohs(s6->sin6_port));
	} else if (sa->ss_family == AF_INET) {
		const struct sockaddr_in *s4 = (const void *)sa;
		inet_ntop(AF_INET, &s4->sin_addr, addr, INET6_ADDRSTRLEN);
		snprintf(port, 8, "%u", ntohs(s4->sin_port));
	} else {
		strcpy(addr, "127.0.0.1");
		strcpy(port, "0");
	}
}

#define ACCEPT_PAUSE 0.1 /* seconds without accepting after accept() found no descriptor */

/* accept_one takes one connection: the listener stays ready while more wait, and taking one
 * at a time spreads a burst over the idle workers instead of letting the first take it all. */
static void accept_one(void)
{
	for (int i = 0; i < 1 && !d.draining; i++) {
		struct sockaddr_storage sa;
		socklen_t len = sizeof(sa);
		int fd = accept4(d.lfd, (struct sockaddr *)&sa, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0 && (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)) {
			/* The connection stays in the backlog, and the level-triggered listener would
			 * wake the loop for it at once, forever: not listening for a while. */
			static double logged;
			if (d.now - logged >= 60) {
				fprintf(stderr, "peregrine-php: accept: %s: not accepting for %g s\n", strerror(errno), ACCEPT_PAUSE);
				logged = d.now;
			}
			d.accept_paused = d.now + ACCEPT_PAUSE;
			update_listening();
			return;
		}
		if (fd < 0)
			return; /* EAGAIN: another worker took it, or none left */
		struct conn *c = calloc(1, sizeof(*c));
		if (c == NULL) {
			close(fd);
			return;
		}
		int one = 1;
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		c->fd = fd;
		sockaddr_text(&sa, c->raddr, c->rport);
		len = sizeof(sa);
		if (getsockname(fd, (struct sockaddr *)&sa, &len) == 0)
			sockaddr_text(&sa, c->laddr, c->lport);
		c->raddr_len = strlen(c->raddr);
		c->rport_len = strlen(c->rport);
		c->laddr_len = strlen(c->laddr);
		c->lport_len = strlen(c->lport);
		c->req.fields = d.fields;
		c->accepted = d.now;
		c->deadline = c->accepted + d.head_timeout;
		c->next = d.conns;
		if (d.conns)
			d.conns->prev = c;
		d.conns = c;
		d.nconns++;
		struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP | EPOLLET, .data.ptr = c};
		if (epoll_ctl(d.ep, EPOLL_CTL_ADD, fd, &ev) < 0)
			drop(c);
	}
	update_listening(); /* at the connection cap: the other workers accept */
}

/* listen_wanted says whether the worker accepts now: not draining, below workers.concurrency
 * requests in PHP (fibers), below its share of http.max_connections (at the cap a connection
 * waits in the backlog for another worker or a close, as behind the front), and not out of
 * descriptors a moment ago. */
static bool listen_wanted(void)
{
	return !d.draining && (!d.fibers || d.inflight < d.max_inflight) && d.nconns < d.max_conns &&
	       d.now >= d.accept_paused;
}

static void update_listening(void)
{
	bool want = listen_wanted();
	if (want == d.listening || d.lfd < 0)
		return;
	struct epoll_event lev = {.events = EPOLLIN, .data.ptr = &listen_marker};
	epoll_ctl(d.ep, want ? EPOLL_CTL_ADD : EPOLL_CTL_DEL, d.lfd, &lev);
	d.listening = want;
}

/* ---- writing ---- */

/* send_all writes the answers held back (hold) and then iov whole, in one sendmsg() when the
 * socket has room, waiting up to write_timeout for room each time it is full; a failure marks
 * the connection broken and drops the rest of its answer. */
static void send_queued(struct conn *c, struct iovec *iov, int n);
static void write_held(struct conn *c);

/* wait_writable waits up to write_timeout for room on c's socket (concurrency 1: the worker's
 * other connections wait meanwhile, docs/direct.md). The wait is the client's, not the
 * script's: exec_timeout's timer is paused during it, and busy_since (the daemon's backstop)
 * moves on by as much, so that a client slow to read does not get the worker killed. */
static bool wait_writable(struct conn *c)
{
	struct itimerval left = {0}, off = {0};
	bool paused = d.exec_timeout > 0 && d.timer_armed && c == d.cur;
	if (paused)
		setitimer(ITIMER_REAL, &off, &left);
	double t0 = now();
	struct pollfd p = {.fd = c->fd, .events = POLLOUT};
	int r;
	do
		r = poll(&p, 1, (int)(d.write_timeout * 1000));
	while (r < 0 && errno == EINTR);
	double waited = now() - t0;
	if (paused) {
		if (left.it_value.tv_sec == 0 && left.it_value.tv_usec == 0)
			left.it_value.tv_usec = 1; /* it was due as the wait began */
		setitimer(ITIMER_REAL, &left, NULL);
	}
	if (c == d.cur) {
		uint64_t busy = __atomic_load_n(&stats->busy_since, __ATOMIC_RELAXED);
		if (busy != 0)
			__atomic_store_n(&stats->busy_since, busy + (uint64_t)(waited * 1e9), __ATOMIC_RELAXED);
	}
	return r > 0;
}

static void send_all(struct conn *c, struct iovec *given, int n)
{
	if (d.fibers) {
		send_queued(c, given, n);
		return;
	}
	struct iovec all[8], *iov = all;
	if (c->held_len > 0)
		all[0] = (struct iovec){c->held, c->held_len};
	if (n > 7)
		n = 7; /* callers give at most 4 */
	if (n > 0)
		memcpy(all + (c->held_len > 0), given, sizeof(*given) * (size_t)n);
	n += c->held_len > 0;
	c->held_len = 0;
	c->held_n = 0;
	while (n > 0 && !c->broken) {
		struct msghdr msg = {.msg_iov = iov, .msg_iovlen = (size_t)n};
		ssize_t w = n == 1 ? send(c->fd, iov->iov_base, iov->iov_len, MSG_NOSIGNAL) : sendmsg(c->fd, &msg, MSG_NOSIGNAL);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			if (errno != EAGAIN || !wait_writable(c))
				c->broken = true;
			continue;
		}
		stats->bytes_out += (uint64_t)w;
		for (; n > 0 && (size_t)w >= iov->iov_len; iov++, n--)
			w -= (ssize_t)iov->iov_len;
		if (n > 0) {
			iov->iov_base = (char *)iov->iov_base + w;
			iov->iov_len -= (size_t)w;
		}
	}
}

/* flush writes the answers held back, if any. */
static void flush(struct conn *c)
{
	if (d.fibers)
		write_held(c);
	else if (c->held_len > 0)
		send_all(c, NULL, 0);
}

/* The answers of pipelined requests that arrived together are gathered into one write, up to
 * this many bytes and this many answers. */
#define MAX_HELD 65536
#define MAX_HELD_ANSWERS 32

/* hold keeps a whole answer back instead of writing it, when bytes of the connection's next
 * request have come already, so that the answers of one read go out in one write: it reports
 * false when the answer must go now. The connection's next request then runs before the other
 * connections' (next_request puts it first), as Workerman and Swoole serve what one read
 * brought before they read again: waiting behind the other connections, the answers held
 * would wait too, and holding only when no other connection was ready held nothing under load
 * (16 pipelined requests took 16 writes). Only the answers of GET and HEAD are held, and only
 * while GETs and HEADs follow (next_request): a worker that dies loses what it holds, and a
 * client may repeat those requests, not a POST whose effect it was never told of. The other connections wait for at most
 * MAX_HELD_ANSWERS requests of it. The answers held are written with the next one, when the
 * next request does not come whole (next_request), or by the exec_timeout handler before its
 * 504. */
static bool hold(struct conn *c, const struct iovec *iov, int n)
{
	size_t total = c->held_len;
	for (int i = 0; i < n; i++)
		total += iov[i].iov_len;
	if (!c->safe || c->close_after || c->in_len == 0 || total > MAX_HELD || c->held_n >= MAX_HELD_ANSWERS)
		return false;
	for (int i = 0; i < n; i++)
		if (!append(&c->held, &c->held_len, &c->held_cap, iov[i].iov_base, iov[i].iov_len))
			return false;
	c->held_n++;
	return true;
}

static void count_status(int status)
{
	if (status >= 100 && status < 600)
		stats->status[status / 100 - 1]++;
}

static const char *reason(int status)
{
	switch (status) {
	case 100: return "Continue";
	case 101: return "Switching Protocols";
	case 103: return "Early Hints";
	case 200: return "OK";
	case 201: return "Created";
	case 202: return "Accepted";
	case 204: return "No Content";
	case 206: return "Partial Content";
	case 301: return "Moved Permanently";
	case 302: return "Found";
	case 303: return "See Other";
	case 304: return "Not Modified";
	case 307: return "Temporary Redirect";
	case 308: return "Permanent Redirect";
	case 400: return "Bad Request";
	case 401: return "Unauthorized";
	case 403: return "Forbidden";
	case 404: return "Not Found";
	case 405: return "Method Not Allowed";
	case 408: return "Request Timeout";
	case 409: return "Conflict";
	case 413: return "Content Too Large";
	case 414: return "URI Too Long";
	case 417: return "Expectation Failed";
	case 422: return "Unprocessable Content";
	case 429: return "Too Many Requests";
	case 431: return "Request Header Fields Too Large";
	case 500: return "Internal Server Error";
	case 501: return "Not Implemented";
	case 502: return "Bad Gateway";
	case 503: return "Service Unavailable";
	case 504: return "Gateway Timeout";
	case 505: return "HTTP Version Not Supported";
	}
	return "";
}

/* decimal writes v in decimal at buf (at least 20 bytes) and returns its length. */
static size_t decimal(char *buf, uint64_t v)
{
	char tmp[20];
	size_t n = 0;
	do
		tmp[n++] = (char)('0' + v % 10);
	while ((v /= 10) != 0);
	for (size_t i = 0; i < n; i++)
		buf[i] = tmp[n - 1 - i];
	return n;
}

/* The Date header's value, formatted once a second. */
static const char *http_date(void)
{
	static char buf[64];
	static time_t last;
	time_t t = time(NULL);
	if (t != last) {
		struct tm tm;
		gmtime_r(&t, &tm);
		strftime(buf, sizeof(buf), "%a, %d %b %Y %H:%M:%S GMT", &tm);
		last = t;
	}
	return buf;
}

/* refuse answers a request the worker will not hand to PHP, and ends the connection. */
static void refuse(struct conn *c, int status, const char *why)
{
	char buf[256];
	int n = snprintf(buf, sizeof(buf),
			 "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %zu\r\n"
			 "Connection: close\r\n\r\n%s\n",
			 status, reason(status), strlen(why) + 1, why);
	struct iovec v = {buf, (size_t)n < sizeof(buf) ? (size_t)n : sizeof(buf) - 1};
	count_status(status);
	send_all(c, &v, 1);
	linger(c);
}

/* ---- reading ---- */

static bool append(char **buf, size_t *len, size_t *cap, const char *s, size_t n)
{
	if (*len + n + 1 > *cap) {
		size_t want = *cap ? *cap : 256;
		while (want < *len + n + 1)
			want *= 2;
		char *p = realloc(*buf, want);
		if (p == NULL)
			return false;
		*buf = p;
		*cap = want;
	}
	memcpy(*buf + *len, s, n);
	*len += n;
	(*buf)[*len] = '\0';
	return true;
}

static bool add_field(struct conn *c, size_t *cap, const char *s, size_t n)
{
	return append(&c->head, &c->head_len, cap, s, n) && append(&c->head, &c->head_len, cap, "", 1);
}

/* put writes n bytes of s and the NUL that ends a field at p, and returns where the next
 * field goes. */
static char *put(char *p, const char *s, size_t n)
{
	memcpy(p, s, n);
	p[n] = '\0';
	return p + n + 1;
}

/* build_head writes the request in the REQUEST frame's head format (docs/protocol.md), as the
 * server's front would: the fixed fields, no files, DOCUMENT_ROOT and SERVER_NAME, then the
 * headers with host first and Transfer-Encoding left out (the body arrives de-chunked, with
 * a content-length added once its length is known). Sized first and written with memcpy():
 * appending field by field (a capacity check and a NUL each) cost 5% of a small request. */
static bool build_head(struct conn *c)
{
	const struct ph_request *r = &c->req;
	const char *t = r->target;
	size_t tlen = r->target_len;
	const char *qm = memchr(t, '?', tlen);
	size_t plen = qm ? (size_t)(qm - t) : tlen, qlen = qm ? tlen - plen - 1 : 0;
	/* A full URL's empty path ("http://h?x", which the parser gives as "?x") is "/". */
	bool root = tlen > 0 && t[0] == '?';
	const char *server = d.server_name && *d.server_name ? d.server_name : c->laddr;
	size_t server_len = server == c->laddr ? c->laddr_len : d.server_name_len;

	/* The fixed fields (the target three times over, at most), the parameters, the host, each
	 * with its NUL (20 is more than they have), then the headers. */
	size_t cap = r->method_len + 2 * (root + tlen) + 8 + c->raddr_len + c->rport_len + c->laddr_len + c->lport_len +
		     strlen("http" "0" "1" "SERVER_NAME" "host") + server_len + r->host_len + 20;
	if (d.document_root)
		cap += 13 + d.document_root_len + 2;
	for (size_t i = 0; i < r->nfields; i++)
		cap += r->fields[i].name_len + r->fields[i].value_len + 2;
	c->head = malloc(cap);
	c->head_len = 0;
	if (c->head == NULL)
		return false;
	char *p = c->head;
	p = put(p, r->method, r->method_len);
	if (root)
		*p++ = '/';
	p = put(p, t, tlen);
	if (root)
		*p++ = '/';
	p = put(p, t, plen);
	p = put(p, qm ? qm + 1 : "", qlen);
	p = put(p, r->minor > 0 ? "HTTP/1.1" : "HTTP/1.0", 8);
	p = put(p, c->raddr, c->raddr_len);
	p = put(p, c->rport, c->rport_len);
	p = put(p, c->laddr, c->laddr_len);
	p = put(p, c->lport, c->lport_len);
	p = put(p, "http", 4);
	p = put(p, "", 0);
	p = put(p, "0", 1); /* no files */
	if (d.document_root) {
		p = put(p, "2", 1);
		p = put(p, "DOCUMENT_ROOT", 13);
		p = put(p, d.document_root, d.document_root_len);
	} else {
		p = put(p, "1", 1);
	}
	p = put(p, "SERVER_NAME", 11);
	p = put(p, server, server_len);
	if (r->host) {
		p = put(p, "host", 4);
		p = put(p, r->host, r->host_len);
	}
	for (size_t i = 0; i < r->nfields; i++) {
		const struct ph_field *f = &r->fields[i];
		if (f->name_len == 4 && strncasecmp(f->name, "host", 4) == 0)
			continue;
		if (f->name_len == 17 && strncasecmp(f->name, "transfer-encoding", 17) == 0)
			continue;
		char *name = p;
		p = put(p, f->name, f->name_len);
		for (size_t j = 0; j < f->name_len; j++)
			if (name[j] >= 'A' && name[j] <= 'Z')
				name[j] = (char)(name[j] + ('a' - 'A'));
		p = put(p, f->value, f->value_len);
	}
	if ((size_t)(p - c->head) > cap) { /* the sizing above is wrong: a bug, never a client's doing */
		fprintf(stderr, "peregrine-php: internal error: a request head overran its buffer\n");
		abort();
	}
	c->head_len = (size_t)(p - c->head) - 1; /* fields are joined by NUL, not terminated */
	return true;
}

static void consume(struct conn *c, size_t n)
{
	memmove(c->in, c->in + n, c->in_len - n);
	c->in_len -= n;
}

/* count_pairs counts the non-empty items of s[0..n) separated by sep, blanks before an item
 * aside, as internal/httpserver's countPairs (and PHP) count input variables. */
static size_t count_pairs(const char *s, size_t n, char sep)
{
	size_t count = 0;
	bool item = false;
	for (size_t i = 0; i < n; i++) {
		if (s[i] == sep) {
			count += item;
			item = false;
		} else if (item || (s[i] != ' ' && s[i] != '\t')) {
			item = true;
		}
	}
	return count + item;
}

/* check_request refuses what the proxied front refuses beyond the parser's limits
 * (internal/httpserver's checkRequest): a repeated Authorization or Proxy-Authorization (400;
 * which one PHP would believe is a guess), more than http.max_cookies cookies over the Cookie
 * headers (431), more than http.max_input_vars query string fields (400). It answers and
 * reports false when it refuses. */
static bool check_request(struct conn *c)
{
	const struct ph_request *r = &c->req;
	size_t auth = 0, proxy_auth = 0, cookies = 0;
	char why[96];
	for (size_t i = 0; i < r->nfields; i++) {
		const struct ph_field *f = &r->fields[i];
		if (f->name_len == 13 && strncasecmp(f->name, "authorization", 13) == 0)
			auth++;
		else if (f->name_len == 19 && strncasecmp(f->name, "proxy-authorization", 19) == 0)
			proxy_auth++;
		else if (f->name_len == 6 && strncasecmp(f->name, "cookie", 6) == 0)
			cookies += count_pairs(f->value, f->value_len, ';');
	}
	if (auth > 1 || proxy_auth > 1) {
		refuse(c, 400, auth > 1 ? "more than one Authorization header" : "more than one Proxy-Authorization header");
		return false;
	}
	if (cookies > d.max_cookies) {
		snprintf(why, sizeof(why), "more than %zu cookies (http.max_cookies)", d.max_cookies);
		refuse(c, 431, why);
		return false;
	}
	const char *qm = memchr(r->target, '?', r->target_len);
	if (qm && count_pairs(qm + 1, r->target_len - (size_t)(qm + 1 - r->target), '&') > d.max_input_vars) {
		snprintf(why, sizeof(why), "more than %zu query string fields (http.max_input_vars)", d.max_input_vars);
		refuse(c, 400, why);
		return false;
	}
	return true;
}

/* progress moves a connection through HEAD and BODY as far as its bytes allow. */
static void progress(struct conn *c)
{
	for (;;) {
		if (c->state == C_HEAD) {
			if (c->in_len == 0)
				return;
			if (!c->head_started) {
				c->head_started = true;
				c->deadline = d.now + d.head_timeout;
			}
			int h = ph_parse_request(&c->req, c->in, c->in_len, &d.lim);
			if (h == PH_INCOMPLETE)
				return;
			if (h == PH_ERROR) {
				refuse(c, c->req.status, c->req.error);
				return;
			}
			if (!check_request(c))
				return;
			/* A WebSocket upgrade goes to the server's hub (handoff.c says who owns what),
			 * after the answers held for the requests before it on the connection. */
			if (c->held_len > 0 && pg_handoff_wanted(c->in, (size_t)h))
				flush(c);
			enum pg_handoff_result ho = pg_handoff(c->fd, c->in, (size_t)h, c->in_len);
			if (ho == PG_HANDOFF_DONE) {
				drop(c);
				return;
			}
			if (ho == PG_HANDOFF_FAILED) {
				refuse(c, 503, "the server could not take the WebSocket connection");
				return;
			}
			const struct ph_request *r = &c->req;
			c->keep_alive = r->keep_alive;
			c->http10 = r->minor == 0;
			c->is_head = r->method_len == 4 && memcmp(r->method, "HEAD", 4) == 0;
			c->after_post = r->method_len == 4 && memcmp(r->method, "POST", 4) == 0;
			c->safe = c->is_head || (r->method_len == 3 && memcmp(r->method, "GET", 3) == 0);
			c->asterisk = r->target_len == 1 && r->target[0] == '*';
			c->chunked = r->chunked;
			c->want = r->chunked ? 0 : (uint64_t)r->content_length;
			c->body_len = 0;
			memset(&c->ch, 0, sizeof(c->ch));
			if (d.max_body && !r->chunked && c->want > d.max_body) {
				refuse(c, 413, "request body too large");
				return;
			}
			if (!build_head(c)) {
				refuse(c, 500, "out of memory");
				return;
			}
			if (r->expect_continue && c->in_len == (size_t)h) {
				struct iovec v = {(char *)"HTTP/1.1 100 Continue\r\n\r\n", 25};
				send_all(c, &v, 1);
			}
			consume(c, (size_t)h);
			c->state = C_BODY;
			c->deadline = d.now + d.body_timeout;
		}
		if (c->state != C_BODY)
			return;
		if (!c->chunked) {
			size_t n = c->in_len < c->want ? c->in_len : (size_t)c->want;
			if (n > 0) {
				if (!append(&c->body, &c->body_len, &c->body_cap, c->in, n)) {
					refuse(c, 500, "out of memory");
					return;
				}
				consume(c, n);
				c->want -= n;
				c->deadline = d.now + d.body_timeout;
			}
			if (c->want == 0)
				add_ready(c);
			return;
		}
		for (;;) {
			size_t used, dlen;
			const char *data, *err = NULL;
			int s = ph_chunked_next(&c->ch, c->in, c->in_len, &used, &data, &dlen, &err);
			if (s == PH_ERROR) {
				refuse(c, 400, err);
				return;
			}
			/* A chunk that declares more than the limit is refused before its data comes
			 * (compared without a sum that could wrap: remain comes from the client). */
			if (d.max_body && (c->body_len + dlen > d.max_body || c->ch.remain > d.max_body - c->body_len - dlen)) {
				refuse(c, 413, "request body too large");
				return;
			}
			if (dlen > 0) {
				if (d.max_body && c->body_len + dlen > d.max_body) {
					refuse(c, 413, "request body too large");
					return;
				}
				if (!append(&c->body, &c->body_len, &c->body_cap, data, dlen)) {
					refuse(c, 500, "out of memory");
					return;
				}
			}
			consume(c, used);
			if (used > 0)
				c->deadline = d.now + d.body_timeout;
			if (s == PH_CHUNK_DONE) {
				char n[24];
				size_t cap = c->head_len + 1;
				int len = snprintf(n, sizeof(n), "%zu", c->body_len);
				c->head[c->head_len] = '\0'; /* join the added pair */
				c->head_len++;
				if (!add_field(c, &cap, "content-length", 14) || !append(&c->head, &c->head_len, &cap, n, (size_t)len)) {
					refuse(c, 500, "out of memory");
					return;
				}
				add_ready(c);
				return;
			}
			if (s == PH_INCOMPLETE)
				return;
		}
	}
}

/* fill reads what the socket holds (edge-triggered: until it is empty, or the buffer is full
 * while a request waits), and moves the connection on. */
static void fill(struct conn *c)
{
	for (;;) {
		if (c->state == C_LINGER) {
			char sink[4096];
			ssize_t r = read(c->fd, sink, sizeof(sink));
			if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) {
				drop(c);
				return;
			}
			if (r < 0)
				return;
			continue;
		}
		progress(c);
		if (c->dead) /* handed to the server */
			return;
		if (c->state == C_LINGER)
			continue;
		size_t limit = d.lim.max_head + 65536;
		if (c->in_len == c->in_cap) {
			if (c->state >= C_READY || c->in_cap >= limit) {
				c->more = true; /* read again once its request is answered */
				return;
			}
			size_t cap = c->in_cap ? c->in_cap * 2 : 16384;
			char *p = realloc(c->in, cap);
			if (p == NULL) {
				drop(c);
				return;
			}
			c->in = p;
			c->in_cap = cap;
		}
		size_t room = c->in_cap - c->in_len;
		ssize_t r = read(c->fd, c->in + c->in_len, room);
		if (r > 0) {
			c->in_len += (size_t)r;
			stats->bytes_in += (uint64_t)r;
			c->more = false;
			if ((size_t)r < room) { /* the socket is empty: the next bytes bring an event */
				progress(c);
				if (!c->dead && c->state == C_LINGER)
					continue;
				return;
			}
			continue;
		}
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0 && errno == EAGAIN) {
			c->more = false;
			return;
		}
		/* The client closed (or failed): a request it has sent whole is still answered. */
		c->eof = true;
		c->more = false;
		if (c->state < C_READY || (d.fibers && c->state == C_BUSY && r < 0))
			drop(c);
		else if (d.fibers && c->state == C_BUSY)
			cancel_request(c); /* as the proxied front does when its client leaves */
		return;
	}
}

/* ---- the loop ---- */

/* A kept-alive connection idle when a drain begins: its client may be sending its next
 * request right now (under load it does, the moment its last answer came), and a client does
 * not send a POST again on a connection closed under it. So it is not closed at once: it gets
 * d.drain_grace from the drain's start (1 s, or less if its idle_timeout comes sooner; drain_grace in
 * PEREGRINE_DIRECT, for tests) for that request, answered with Connection: close. 1 s is many
 * round trips for a client that keeps its connection busy, and bounds what idle connections
 * (a balancer's spare ones) add to a drain.
 *
 * A connection accepted just before a drain whose request has not come yet: its client sent
 * one at once, most likely, and it is still on its way; closing the connection now would fail
 * it (a client sends a request again only on a connection it used before). It gets
 * d.fresh_grace from its accept (1 s, as drain_grace; fresh_grace in PEREGRINE_DIRECT, for
 * tests), if that is longer than the drain_grace every idle connection gets. 0.2 s was too
 * short on a loaded machine: a client's first request came later than that now and then (3
 * POSTs failed with EOF in 12 runs of the fibers reset test; 0 in 12 with 1 s).
 *
 * A connection accepted long before and never used gets drain_grace too, not nothing: a
 * client's pool holds such connections (Go's dials one for a request that another connection
 * then served, and keeps it), picks one for its next request at any moment, and sends a
 * request again on neither kind (Go never does on a connection it had not used: "the server
 * should not have hung up"). Closing them at once failed a POST with EOF in about one run of
 * 25 of the reset tests. What it costs, up to drain_grace more for a drain with a balancer's
 * spare connections, is paid once a reset, since a reset's old workers drain together. */

static void drain(void)
{
	if (d.draining)
		return;
	d.draining = true;
	if (d.listening)
		epoll_ctl(d.ep, EPOLL_CTL_DEL, d.lfd, NULL);
	d.listening = false;
	close(d.lfd);
	d.lfd = -1;
	for (struct conn *c = d.conns; c; c = c->next) {
		if (c->state != C_HEAD || c->in_len != 0)
			continue; /* a request begun: it ends, its answer says Connection: close */
		double until = d.now + d.drain_grace;
		if (!c->used && c->accepted + d.fresh_grace > until)
			until = c->accepted + d.fresh_grace;
		if (c->deadline > until)
			c->deadline = until; /* then expire() closes it */
	}
}

/* On fd 3: STOP, or the server's end. Both drain. */
static void control(void)
{
	char buf[64];
	ssize_t r = read(FD_CTL, buf, sizeof(buf));
	if (r < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (r > 0 && buf[0] == PG_VERSION && r >= 2 && buf[1] != PG_STOP)
		return; /* nothing else is sent to a direct worker */
	if (r > 0)
		pg.stopped = true; /* the server asked: it expects no DONE with LAST */
	epoll_ctl(d.ep, EPOLL_CTL_DEL, FD_CTL, NULL);
	drain();
}

static void timed_out(struct conn *c);
static void update_busy(void);

/* expire closes the connections past their deadline: silently when no request began, with
 * 408 when one is half read. */
static int expire(void)
{
	double t = tick(), next = 0;
	for (struct conn *c = d.conns, *n; c; c = n) {
		n = c->next;
		if (d.fibers && c->held_len > 0) { /* a client that does not read its answers */
			if (c->wdeadline <= t) {
				drop(c);
				continue;
			}
			if (next == 0 || c->wdeadline < next)
				next = c->wdeadline;
		}
		if (d.fibers && c->state == C_BUSY && d.exec_timeout > 0 && !c->cancelled && !c->want_room) {
			double limit = c->began + d.exec_timeout;
			if (limit <= t)
				timed_out(c);
			else if (next == 0 || limit < next)
				next = limit;
		}
		if (c->state == C_READY || c->state == C_BUSY || c->deadline == 0)
			continue;
		if (c->deadline <= t) {
			if (c->state == C_BODY || (c->state == C_HEAD && c->in_len > 0))
				refuse(c, 408, "request timed out"); /* then it lingers, with a deadline */
			else {
				drop(c);
				continue;
			}
		}
		if (next == 0 || c->deadline < next)
			next = c->deadline;
	}
	bury();
	if (d.accept_paused > t && (next == 0 || d.accept_paused < next))
		next = d.accept_paused;
	update_listening();
	d.next_at = next;
	if (next == 0)
		return -1;
	return (int)((next - t) * 1000) + 1;
}

/* In a drain, an idle connection whose grace is over is read once more before expire()
 * closes it: bytes its client sent that no event has reported yet (PHP was running) are a
 * request begun. */
static void close_idle(void)
{
	for (struct conn *c = d.conns, *n; c; c = n) {
		n = c->next;
		if (c->state == C_HEAD && c->in_len == 0 && c->deadline <= d.now)
			fill(c);
	}
	bury();
}

static struct conn *pop_ready(void)
{
	struct conn *c = d.ready;
	if (c) {
		d.ready = c->ready_next;
		if (!d.ready)
			d.ready_tail = NULL;
	}
	return c;
}

bool pg_direct_next(void)
{
	tick(); /* PHP ran since the last reading */
	for (;;) {
		struct conn *c = pop_ready();
		if (c) {
			c->state = C_BUSY;
			c->used = true;
			c->broken = false;
			c->chunked_out = false;
			if (c->asterisk) {
				c->close_after = !c->keep_alive || d.draining;
				answer_asterisk(c);
				bury();
				continue;
			}
			if (d.max_jobs && d.served + 1 >= d.max_jobs)
				drain(); /* the last job: what follows on its connection is not read */
			c->close_after = !c->keep_alive || d.draining;
			d.cur = c;
			d.body_pos = 0;
			d.began = d.now;
			uint64_t wall = realtime_ns();
			__atomic_store_n(&stats->busy_since, wall, __ATOMIC_RELAXED);
			arm_exec_timeout();
			pg_request_load(++d.next_id, c->head, c->head_len, c->body_len, (double)wall / 1e9);
			c->head = NULL; /* pg.req owns it now */
			return true;
		}
		if (d.draining)
			close_idle();
		if (d.ready)
			continue; /* close_idle read a whole request: no waiting with it ready */
		int timeout = expire(); /* which may close connections */
		if (d.draining && d.nconns == 0)
			return false;
		struct epoll_event ev[64];
		int n = epoll_wait(d.ep, ev, 64, timeout);
		tick();
		for (int i = 0; i < n; i++) {
			if (ev[i].data.ptr == &listen_marker)
				accept_one();
			else if (ev[i].data.ptr == &ctl_marker)
				control();
		}
		for (int i = 0; i < n; i++) {
			c = ev[i].data.ptr;
			if (c != (void *)&listen_marker && c != (void *)&ctl_marker && !c->dead)
				fill(c);
		}
		bury(); /* a connection dropped by one event may be named by a later one */
	}
}

size_t pg_direct_read_body(char *buf, size_t count)
{
	struct conn *c = d.cur;
	size_t n = 0;
	if (c && d.body_pos < c->body_len) {
		n = c->body_len - d.body_pos;
		if (n > count)
			n = count;
		memcpy(buf, c->body + d.body_pos, n);
		d.body_pos += n;
	}
	pg.req.body_left = c ? c->body_len - d.body_pos : 0;
	return n;
}

/* The answer's head: status line, PHP's headers (but the framing ones, which are the
 * worker's to set), Date, and the framing. */
static void answer_head(struct conn *c, smart_string *h, bool end, int status, const char *head, size_t head_len,
			size_t body_len)
{
	bool bodyless = status == 204 || status == 304;

	/* A STOP that came while PHP ran: the answer must already say Connection: close. Looked
	 * for only after a request that took a millisecond or more (one poll() then costs little);
	 * a STOP during a shorter one is seen at the next turn of the loop, which closes the
	 * connection as idle. No signal: SIGIO would interrupt PHP's own waits (poll, sleep). */
	if (!d.fibers && !d.draining && tick() - d.began >= 0.001) {
		struct pollfd ctl = {.fd = FD_CTL, .events = POLLIN};
		if (poll(&ctl, 1, 0) > 0)
			control();
	}
	if (d.draining) /* a STOP came while PHP ran */
		c->close_after = true;
	count_status(status);

	/* Written by hand: snprintf() cost a request more than the rest of its head. */
	char line[32];
	const char *why = reason(status);
	smart_string_appendl(h, "HTTP/1.1 ", 9);
	smart_string_appendl(h, line, decimal(line, (uint64_t)status));
	smart_string_appendc(h, ' ');
	smart_string_appends(h, why);
	smart_string_appendl(h, "\r\n", 2);
	for (const char *p = head, *e = head + head_len; p && p < e;) {
		size_t nlen = strnlen(p, (size_t)(e - p)); /* a frame's head is not NUL-terminated */
		const char *v = p + nlen + 1;
		size_t vlen = v < e ? strnlen(v, (size_t)(e - v)) : 0;
		if ((nlen == 14 && strncasecmp(p, "content-length", 14) == 0) ||
		    (nlen == 17 && strncasecmp(p, "transfer-encoding", 17) == 0)) {
			/* the worker frames the answer itself */
		} else if (nlen == 10 && strncasecmp(p, "connection", 10) == 0) {
			if (ph_has_token(v, vlen, "close")) /* not NUL-terminated; "x-closeable" is not close */
				c->close_after = true;
		} else {
			smart_string_appendl(h, p, nlen);
			smart_string_appendl(h, ": ", 2);
			smart_string_appendl(h, v, vlen);
			smart_string_appendl(h, "\r\n", 2);
		}
		p = v + vlen + 1;
	}
	smart_string_appends(h, "Date: ");
	smart_string_appends(h, http_date());
	smart_string_appendl(h, "\r\n", 2);
	if (bodyless || (c->is_head && end && body_len == 0)) {
		/* no body, no length (PHP writes no body for HEAD: the length is unknown) */
	} else if (end) {
		smart_string_appendl(h, "Content-Length: ", 16);
		smart_string_appendl(h, line, decimal(line, body_len));
		smart_string_appendl(h, "\r\n", 2);
	} else if (c->http10) {
		c->close_after = true; /* the answer ends when the connection does */
	} else {
		c->chunked_out = true;
		smart_string_appends(h, "Transfer-Encoding: chunked\r\n");
	}
	if (c->close_after)
		smart_string_appends(h, "Connection: close\r\n");
	else if (c->http10)
		smart_string_appends(h, "Connection: keep-alive\r\n");
	smart_string_appendl(h, "\r\n", 2);
}

/* A body up to this size goes out in the same buffer as its head. */
#define SMALL_BODY 4096

/* emit writes a part of an answer: its head first (started says whether it went out), then
 * body bytes, chunked when the answer streams; end: the answer ends with them. */
static void emit(struct conn *c, bool *started, int status, const char *head, size_t head_len, const char *body,
		 size_t body_len, bool end)
{
	smart_string h = {0};
	char size[24];
	struct iovec iov[4];
	int n = 0;

	status = status < 200 ? 502 : status;
	if (!*started) {
		answer_head(c, &h, end, status, head, head_len, body_len);
		iov[n++] = (struct iovec){h.c, h.len};
		*started = true;
	}
	bool body_allowed = !c->is_head && status != 204 && status != 304;
	if (body_allowed && body_len > 0 && h.len > 0 && !c->chunked_out && body_len <= SMALL_BODY) {
		/* One buffer, one send(): cheaper in the kernel than sendmsg() of two. */
		smart_string_appendl(&h, body, body_len);
		iov[0].iov_len = h.len;
		iov[0].iov_base = h.c;
	} else if (body_allowed && body_len > 0) {
		if (c->chunked_out) {
			int l = snprintf(size, sizeof(size), "%zx\r\n", body_len);
			iov[n++] = (struct iovec){size, (size_t)l};
		}
		iov[n++] = (struct iovec){(char *)body, body_len};
		if (c->chunked_out)
			iov[n++] = (struct iovec){(char *)"\r\n", 2};
	}
	if (end && c->chunked_out)
		iov[n++] = (struct iovec){(char *)"0\r\n\r\n", 5};
	size_t before = c->held_len;
	if (d.fibers || !(end && h.len > 0 && hold(c, iov, n))) {
		c->held_len = before; /* a hold that failed part way holds nothing of this answer */
		send_all(c, iov, n);
	}
	smart_string_free(&h);
}

void pg_direct_emit(uint16_t flags)
{
	struct pg_request *r = &pg.req;
	emit(d.cur, &r->started, r->status, r->resp_head, r->resp_head_len, pg.out, pg.out_len, !(flags & PG_FLAG_MORE));
	pg.out_len = 0;
}

static void hints(struct conn *c, const char *pairs, size_t len)
{
	smart_string h = {0};

	if (c->http10)
		return;
	smart_string_appends(&h, "HTTP/1.1 103 Early Hints\r\n");
	for (const char *p = pairs, *e = pairs + len; p < e;) {
		size_t nlen = strnlen(p, (size_t)(e - p)); /* a frame's head is not NUL-terminated */
		const char *v = p + nlen + 1;
		size_t vlen = v < e ? strnlen(v, (size_t)(e - v)) : 0;
		smart_string_appendl(&h, p, nlen);
		smart_string_appendl(&h, ": ", 2);
		smart_string_appendl(&h, v, vlen);
		smart_string_appendl(&h, "\r\n", 2);
		p = v + vlen + 1;
	}
	smart_string_appendl(&h, "\r\n", 2);
	struct iovec v = {h.c, h.len};
	send_all(c, &v, 1);
	smart_string_free(&h);
}

void pg_direct_hints(const char *pairs, size_t len)
{
	hints(d.cur, pairs, len);
}

void pg_direct_request_end(void)
{
	struct conn *c = d.cur;

	d.cur = NULL;
	if (c == NULL)
		return;
	d.served++;
	stats->requests++;
	count_latency(tick() - d.began);
	__atomic_store_n(&stats->busy_since, 0, __ATOMIC_RELAXED);
	if (over_memory()) {
		fprintf(stderr, "peregrine-php: the worker's memory exceeds workers.max_memory: it finishes what it began and exits\n");
		drain();
	}
	next_request(c);
}

/* next_request readies a connection whose answer is sent for its next request, or ends it. */
static void next_request(struct conn *c)
{
	if (c->body_cap > 65536) { /* a large body's buffer is not kept for the connection's life */
		free(c->body);
		c->body = NULL;
		c->body_cap = 0;
	}
	c->body_len = 0;
	if (c->broken) {
		drop(c);
		return;
	}
	if (c->close_after || c->eof) {
		flush(c);
		linger(c);
		return;
	}
	c->state = C_HEAD;
	c->head_started = false;
	memset(&c->req, 0, sizeof(c->req));
	c->req.fields = d.fields;
	c->req.after_post = c->after_post;
	c->deadline = d.now + d.idle_timeout;
	c->run_next = !d.fibers && c->held_len > 0;
	if (c->more)
		fill(c);
	else
		progress(c); /* a pipelined request may be here already */
	c->run_next = false;
	if (!c->dead && (c->state != C_READY || !c->safe))
		flush(c); /* the next request is not here whole, or may change something: what was held goes now */
}

/* answer_asterisk answers OPTIONS *, which asks about the server, not a resource, as the
 * proxied front does: 200 without a body, and no script runs for it. */
static void answer_asterisk(struct conn *c)
{
	char buf[128];
	int n = snprintf(buf, sizeof(buf), "HTTP/1.1 200 OK\r\nDate: %s\r\nContent-Length: 0\r\n%s\r\n",
			 http_date(), c->close_after ? "Connection: close\r\n" : "");
	struct iovec v = {buf, (size_t)n};
	count_status(200);
	free(c->head);
	c->head = NULL;
	send_all(c, &v, 1);
	next_request(c);
}


/* The request ending is the worker's last (a fatal error): its answer closes the connection. */
void pg_direct_last(void)
{
	if (d.cur)
		d.cur->close_after = true;
	drain();
}

/* ---- fibers (workers.concurrency > 1) ----
 *
 * PHP's request loop (Peregrine\Async\Internal\Server) runs every request in a fiber of its
 * own and speaks the concurrent protocol (docs/protocol.md) on two streams it opens with
 * peregrine_async_pipe(3) and (4). In direct mode those are not pipes to the server but this
 * file: reading the first runs the loop's pending work (accepts, reads, parses, deadlines)
 * without waiting and gives the REQUEST frames of the requests read whole, and a CANCEL for a
 * request whose client left or whose exec_timeout passed; writing the second gives the
 * RESPONSE, BODY, HINTS and DONE frames, which become HTTP on the request's connection. PHP
 * waits for the first in its own loop (stream_select() on d.ep, which the connections, the
 * listening socket, fd 3, a timerfd for the deadlines and an eventfd for queued frames are in),
 * so one request waiting never stops the others, and the per-request header state and the
 * cancelling are PHP's own, as behind the proxied front. One request at a time per connection:
 * a pipelined request begins after its predecessor's DONE. Nothing here ever waits: what a
 * client does not take at once is held and written when its socket has room, and once a
 * connection holds HELD_CAP the fiber writing to it waits in PHP's loop (room, HELD_CAP) and
 * its next request does not begin (add_ready) until it holds less. */

bool pg_direct_fibers(void)
{
	return d.on && d.fibers;
}

static void put_frame(int type, uint32_t id, const char *a, size_t alen, const char *b, size_t blen, size_t extra)
{
	unsigned char hdr[12] = {PG_VERSION, (unsigned char)type, 0, 0};
	uint32_t len = (uint32_t)(alen + blen + extra);
	memcpy(hdr + 4, &id, 4); /* little-endian, as every target of the runtime */
	memcpy(hdr + 8, &len, 4);
	if (d.rq_pos == d.rq_len)
		d.rq_pos = d.rq_len = 0;
	if (!append(&d.rq, &d.rq_len, &d.rq_cap, (const char *)hdr, sizeof(hdr)) ||
	    (alen && !append(&d.rq, &d.rq_len, &d.rq_cap, a, alen)) || (blen && !append(&d.rq, &d.rq_len, &d.rq_cap, b, blen))) {
		fprintf(stderr, "peregrine-php: out of memory queueing a frame\n");
		exit(PG_EXIT_PROTOCOL);
	}
}

/* cancel_request tells PHP, once, to stop the connection's request; what it answers is dropped. */
static void cancel_request(struct conn *c)
{
	if (c->cancelled)
		return;
	c->cancelled = true;
	c->close_after = true;
	put_frame(PG_CANCEL, c->id, NULL, 0, NULL, 0, 0);
}

static void timed_out(struct conn *c)
{
	fprintf(stderr, "peregrine-php: request %u exceeded workers.exec_timeout: answering 504, its fiber is cancelled\n", c->id);
	if (!c->started) {
		struct iovec v = {(char *)timeout_answer, sizeof(timeout_answer) - 1};
		c->started = true;
		count_status(504);
		send_all(c, &v, 1);
	}
	cancel_request(c);
}

static void watch_out(struct conn *c, bool on)
{
	if (c->out_watched == on || c->fd < 0)
		return;
	struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP | EPOLLET | (on ? EPOLLOUT : 0), .data.ptr = c};
	epoll_ctl(d.ep, EPOLL_CTL_MOD, c->fd, &ev);
	c->out_watched = on;
}

/* send_queued writes what the socket takes now and holds the rest for write_held. */
static void send_queued(struct conn *c, struct iovec *iov, int n)
{
	size_t skip = 0;
	if (c->broken || c->fd < 0)
		return;
	if (c->held_len == 0 && n > 0) {
		struct msghdr msg = {.msg_iov = iov, .msg_iovlen = (size_t)n};
		ssize_t w;
		do
			w = sendmsg(c->fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
		while (w < 0 && errno == EINTR);
		if (w < 0 && errno != EAGAIN) {
			c->broken = true;
			return;
		}
		skip = w > 0 ? (size_t)w : 0;
		stats->bytes_out += skip;
		c->wdeadline = d.now + d.write_timeout;
	}
	for (int i = 0; i < n; i++) {
		if (skip >= iov[i].iov_len) {
			skip -= iov[i].iov_len;
			continue;
		}
		if (!append(&c->held, &c->held_len, &c->held_cap, (char *)iov[i].iov_base + skip, iov[i].iov_len - skip)) {
			c->broken = true;
			return;
		}
		skip = 0;
	}
	watch_out(c, c->held_len > 0);
}

/* room: c holds less than HELD_CAP again. The fiber that waits to write more of its answer
 * goes on (PHP learns it from peregrine_direct_drained()), its wait not counted as the
 * request's run time (exec_timeout, the daemon's backstop), as at concurrency 1; a request
 * parked behind the answers (add_ready) is queued. */
static void room(struct conn *c)
{
	if (c->want_room) {
		c->want_room = false;
		if (c->state == C_BUSY && !c->cancelled) {
			c->began += d.now - c->waiting_since;
			update_busy();
			if (d.drained_len == d.drained_cap) {
				size_t cap = d.drained_cap ? d.drained_cap * 2 : 16;
				uint32_t *p = realloc(d.drained, cap * sizeof(*p));
				if (p == NULL) {
					fprintf(stderr, "peregrine-php: out of memory waking a fiber\n");
					exit(PG_EXIT_PROTOCOL);
				}
				d.drained = p;
				d.drained_cap = cap;
			}
			d.drained[d.drained_len++] = c->id;
		}
	}
	if (c->parked) {
		c->parked = false;
		add_ready(c);
	}
}

/* write_held writes what was held, as the socket takes it; a LINGER waiting for it goes on. */
static void write_held(struct conn *c)
{
	size_t sent = 0;
	bool full = false;
	while (sent < c->held_len && !c->broken && c->fd >= 0) {
		ssize_t w = send(c->fd, c->held + sent, c->held_len - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && errno == EAGAIN) {
			full = true;
			break;
		}
		if (w < 0) {
			c->broken = true;
			c->held_len = 0;
			if (c->state != C_BUSY)
				drop(c);
			else if (d.fibers) /* its client is gone: a fiber waiting for room would wait for ever */
				cancel_request(c);
			return;
		}
		stats->bytes_out += (uint64_t)w;
		sent += (size_t)w;
		c->wdeadline = d.now + d.write_timeout;
	}
	if (sent > 0) { /* moved once a wakeup, not once a send(): a slow reader takes a few KiB a send */
		memmove(c->held, c->held + sent, c->held_len - sent);
		c->held_len -= sent;
	}
	if (c->held_len == 0 && c->held_cap > MAX_HELD) { /* a large answer's buffer is not kept */
		free(c->held);
		c->held = NULL;
		c->held_cap = 0;
	}
	if (c->held_len < HELD_CAP)
		room(c);
	if (full || c->fd < 0)
		return;
	watch_out(c, false);
	if (c->shut_pending) {
		c->shut_pending = false;
		shutdown(c->fd, SHUT_WR);
		c->deadline = d.now + 1;
	}
}

static struct conn *find(uint32_t id)
{
	for (struct conn *c = d.conns; c; c = c->next)
		if (c->state == C_BUSY && c->id == id)
			return c;
	return NULL;
}

/* pg_direct_full (peregrine_direct_full()): whether request id's connection holds HELD_CAP or
 * more of what it was answered: its fiber waits before it writes more, until pg_direct_drained()
 * names it (or its CANCEL comes: the client left, or write_timeout passed). */
bool pg_direct_full(uint32_t id)
{
	struct conn *c;
	if (!d.on || !d.fibers || (c = find(id)) == NULL || c->gone || c->cancelled || c->broken ||
	    c->held_len < HELD_CAP)
		return false;
	if (!c->want_room) {
		c->want_room = true;
		c->waiting_since = d.now;
		update_busy();
	}
	return true;
}

/* pg_direct_drained (peregrine_direct_drained()): the requests whose fiber may write again,
 * since the last call; *ids stays valid until the next call. */
size_t pg_direct_drained(const uint32_t **ids)
{
	size_t n = d.drained_len;
	*ids = d.drained;
	d.drained_len = 0;
	return n;
}

/* The daemon's backstop reads busy_since: when the oldest request in flight began. A request
 * whose fiber waits for its client to take its answer (want_room) is not counted: that wait is
 * the client's, and its start moves on by as much when it goes on (room), as at concurrency 1. */
static void update_busy(void)
{
	double oldest = 0, t = d.now;
	for (struct conn *c = d.conns; c; c = c->next)
		if (c->state == C_BUSY && !c->want_room && (oldest == 0 || c->began < oldest))
			oldest = c->began;
	__atomic_store_n(&stats->busy_since, oldest == 0 ? 0 : realtime_ns() - (uint64_t)((t - oldest) * 1e9), __ATOMIC_RELAXED);
}

/* begin hands a request read whole to PHP: its REQUEST frame is queued. */
static void begin(struct conn *c)
{
	c->state = C_BUSY;
	c->used = true;
	c->broken = c->chunked_out = c->started = c->cancelled = false;
	if (c->asterisk) {
		c->close_after = !c->keep_alive || d.draining;
		answer_asterisk(c);
		return;
	}
	if (d.max_jobs && ++d.begun >= d.max_jobs)
		drain(); /* the last job: what follows on its connections is not read */
	c->close_after = !c->keep_alive || d.draining;
	if (++d.next_id == 0)
		d.next_id = 1;
	c->id = d.next_id;
	c->began = d.now;
	if (d.inflight++ == 0 || __atomic_load_n(&stats->busy_since, __ATOMIC_RELAXED) == 0) /* or all wait for room */
		__atomic_store_n(&stats->busy_since, realtime_ns(), __ATOMIC_RELAXED);
	uint32_t hl = (uint32_t)c->head_len;
	put_frame(PG_REQUEST, c->id, (const char *)&hl, 4, c->head, c->head_len, c->body_len);
	if (c->body_len && !append(&d.rq, &d.rq_len, &d.rq_cap, c->body, c->body_len)) {
		fprintf(stderr, "peregrine-php: out of memory queueing a request\n");
		exit(PG_EXIT_PROTOCOL);
	}
	free(c->head);
	c->head = NULL;
}

/* end_request: the request's DONE came. last: its fiber's fatal error ends the worker. */
static void end_request(struct conn *c, bool last)
{
	if (!c->started && !c->gone && !c->cancelled) {
		static const char fail[] = "HTTP/1.1 500 Internal Server Error\r\nContent-Type: text/plain; charset=utf-8\r\n"
					   "Content-Length: 22\r\nConnection: close\r\n\r\nInternal Server Error\n";
		struct iovec v = {(char *)fail, sizeof(fail) - 1};
		c->started = c->close_after = true;
		count_status(500);
		send_all(c, &v, 1);
	}
	if (last)
		c->close_after = true;
	d.inflight--;
	d.served++;
	stats->requests++;
	count_latency(tick() - c->began);
	c->state = C_HEAD; /* no longer in flight: drop() frees it */
	update_busy();
	if (c->gone)
		drop(c);
	else
		next_request(c);
	if (over_memory()) {
		fprintf(stderr, "peregrine-php: the worker's memory exceeds workers.max_memory: it finishes what it began and exits\n");
		drain();
	}
}

static bool ended(void)
{
	return d.draining && d.nconns == 0 && d.rq_pos == d.rq_len;
}

/* settle arms the timer for the next deadline and says, through the eventfd, whether PHP has
 * something to read: frames, a request ready to begin, or the end. */
static void settle(void)
{
	if (d.draining)
		close_idle();
	expire();
	if (d.next_at != 0 && (d.timer_at == 0 || d.next_at < d.timer_at)) {
		struct itimerspec it = {.it_value = {(time_t)d.next_at, (long)((d.next_at - (double)(time_t)d.next_at) * 1e9)}};
		if (it.it_value.tv_sec == 0 && it.it_value.tv_nsec == 0)
			it.it_value.tv_nsec = 1;
		timerfd_settime(d.tfd, TFD_TIMER_ABSTIME, &it, NULL);
		d.timer_at = d.next_at;
	}
	update_listening(); /* a request ended, a connection closed, a pause passed */
	bool want = d.ready != NULL || d.rq_pos < d.rq_len || ended();
	if (want && !d.kicked) {
		uint64_t one = 1;
		if (write(d.kick, &one, sizeof(one)) == sizeof(one))
			d.kicked = true;
	} else if (!want && d.kicked) {
		uint64_t v;
		if (read(d.kick, &v, sizeof(v)) == sizeof(v) || errno == EAGAIN)
			d.kicked = false;
	}
}

/* pump does what the loop's events ask, without waiting, and begins the requests read whole. */
static void pump(void)
{
	struct epoll_event ev[64];
	int n;
	do {
		n = epoll_wait(d.ep, ev, 64, 0);
		tick();
		for (int i = 0; i < n; i++) {
			void *p = ev[i].data.ptr;
			if (p == &listen_marker)
				accept_one();
			else if (p == &ctl_marker)
				control();
			else if (p == &timer_marker) {
				uint64_t v;
				if (read(d.tfd, &v, sizeof(v)) < 0) {
					/* EAGAIN: re-armed meanwhile */
				}
				d.timer_at = 0;
			}
		}
		for (int i = 0; i < n; i++) {
			struct conn *c = ev[i].data.ptr;
			if (c == (void *)&listen_marker || c == (void *)&ctl_marker || c == (void *)&kick_marker ||
			    c == (void *)&timer_marker || c->dead)
				continue;
			if (ev[i].events & EPOLLOUT)
				write_held(c);
			if (!c->dead && c->fd >= 0 && (ev[i].events & ~(uint32_t)EPOLLOUT))
				fill(c);
		}
		bury();
	} while (n == 64);
	/* A worker with workers.concurrency requests in PHP accepts no more connections: the
	 * other workers take them (they wake for each one, as at concurrency 1). The requests of
	 * the connections it holds still begin (one at a time each): a connection is the worker's
	 * for its life, and a request held back behind the limit would wait although the process
	 * has room (measured: 4 x 256 fibers, 1024 clients, 50 ms requests: 77% of the ideal rate
	 * held back, 97% not). */
	for (struct conn *c; (c = pop_ready()) != NULL;)
		begin(c);
	update_listening();
	bury();
}

/* push parses what PHP wrote, frame by frame, and answers the clients. */
static void push(const char *buf, size_t count)
{
	tick(); /* PHP ran since the last reading */
	/* Parsed where PHP wrote it: only the rest of a frame cut short waits in d.fin, so that a
	 * tick's answers are not copied once more (nor kept: d.fin would grow to the largest). */
	const char *data = buf;
	size_t avail = count;
	if (d.fin_len > 0) {
		if (!append(&d.fin, &d.fin_len, &d.fin_cap, buf, count)) {
			fprintf(stderr, "peregrine-php: out of memory reading an answer\n");
			exit(PG_EXIT_PROTOCOL);
		}
		data = d.fin;
		avail = d.fin_len;
	}
	size_t pos = 0;
	while (avail - pos >= 12) {
		const unsigned char *h = (const unsigned char *)data + pos;
		uint16_t flags;
		uint32_t id, len;
		memcpy(&flags, h + 2, 2);
		memcpy(&id, h + 4, 4);
		memcpy(&len, h + 8, 4);
		if (avail - pos - 12 < len)
			break;
		const char *p = data + pos + 12;
		pos += 12 + (size_t)len;
		if (h[1] == PG_READY) {
			pg_send_ready();
			continue;
		}
		if (h[1] == PG_ERROR) {
			fprintf(stderr, "peregrine-php: %.*s\n", (int)len, p);
			continue;
		}
		struct conn *c = find(id);
		if (h[1] == PG_DONE) {
			if (flags & PG_FLAG_LAST)
				drain(); /* a fatal error or exit(): the worker ends after this */
			if (c)
				end_request(c, flags & PG_FLAG_LAST);
			continue;
		}
		if (c == NULL || c->gone || c->cancelled || c->broken)
			continue; /* the answer of a request whose client left or that timed out */
		if (h[1] == PG_RESPONSE && len >= 6 && !c->started) {
			uint16_t status;
			uint32_t hl;
			memcpy(&status, p, 2);
			memcpy(&hl, p + 2, 4);
			if (hl > len - 6)
				continue;
			emit(c, &c->started, status, p + 6, hl, p + 6 + hl, len - 6 - hl, !(flags & PG_FLAG_MORE));
		} else if (h[1] == PG_BODY && c->started) {
			emit(c, &c->started, 200, NULL, 0, p, len, !(flags & PG_FLAG_MORE));
		} else if (h[1] == PG_HINTS && !c->started) {
			hints(c, p, len);
		}
	}
	if (data == d.fin) {
		memmove(d.fin, d.fin + pos, d.fin_len - pos);
		d.fin_len -= pos;
	} else if (pos < avail && !append(&d.fin, &d.fin_len, &d.fin_cap, data + pos, avail - pos)) {
		fprintf(stderr, "peregrine-php: out of memory reading an answer\n");
		exit(PG_EXIT_PROTOCOL);
	}
	bury();
}

static ssize_t stream_read(php_stream *stream, char *buf, size_t count)
{
	pump();
	size_t n = d.rq_len - d.rq_pos < count ? d.rq_len - d.rq_pos : count;
	memcpy(buf, d.rq + d.rq_pos, n);
	d.rq_pos += n;
	settle();
	if (n == 0 && ended())
		stream->eof = 1;
	return (ssize_t)n;
}

static ssize_t stream_write(php_stream *stream, const char *buf, size_t count)
{
	(void)stream;
	push(buf, count);
	settle();
	return (ssize_t)count;
}

static int stream_close(php_stream *stream, int close_handle)
{
	(void)stream;
	(void)close_handle;
	return 0;
}

static int stream_flush(php_stream *stream)
{
	(void)stream;
	return 0;
}

static int stream_cast(php_stream *stream, int castas, void **ret)
{
	(void)stream;
	if (castas != PHP_STREAM_AS_FD_FOR_SELECT && castas != PHP_STREAM_AS_FD)
		return FAILURE;
	if (ret)
		*(int *)ret = d.ep;
	return SUCCESS;
}

static int stream_set_option(php_stream *stream, int option, int value, void *ptr)
{
	(void)stream;
	(void)value;
	(void)ptr;
	/* Never blocks; the rest (read buffering) is PHP's own. */
	return option == PHP_STREAM_OPTION_BLOCKING ? PHP_STREAM_OPTION_RETURN_OK : PHP_STREAM_OPTION_RETURN_NOTIMPL;
}

static const php_stream_ops stream_ops = {
	stream_write, stream_read, stream_close, stream_flush, "peregrine-direct", NULL, stream_cast, NULL, stream_set_option,
};

/* pg_direct_stream: what peregrine_async_pipe(3) (the requests) or (4) (the answers) gives
 * PHP's request loop in direct mode. */
php_stream *pg_direct_stream(int fd)
{
	return php_stream_alloc(&stream_ops, NULL, NULL, fd == 3 ? "rb" : "wb");
}
