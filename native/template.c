/* template.c: peregrine-php --template, the process workers are forked from (workers.fork).
 *
 * The template starts PHP as a worker would (module startup, OPcache and its preload) and then
 * serves a control socket on fd 3, a SOCK_SEQPACKET end from the server, instead of requests.
 * Each message carries, with SCM_RIGHTS, the four fds of a new worker: its request pipe, its
 * answer pipe, its stdout and its stderr. The template clones itself with CLONE_PARENT, so the
 * child is the server's own child (it waits for it and gets its exit status), replies with the
 * child's pid (or -errno) as an int32, and closes its copies of the fds. The child puts the fds
 * on 3, 4, 1 and 2 and goes on as a worker started by exec would. OPcache's shared memory and
 * what module startup built are shared copy-on-write, as between PHP-FPM's children.
 *
 * The template never runs a PHP request, so nothing seeded per process (mt_rand, session ids)
 * is inherited. It sends its own pid once it is ready, goes by the name peregrine-tmpl (its
 * comm, which ps and top show; the workers keep the program's), and exits at the socket's end
 * of file. */
#include "peregrine.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#define CONTROL_FD 3
#define WORKER_FDS 4
#define TEMPLATE_NAME "peregrine-tmpl" /* its comm (/proc/PID/comm), at most 15 bytes */

/* Where a child puts the fds it was sent: request pipe, answer pipe, stdout, stderr. */
static const int worker_fd[WORKER_FDS] = {3, 4, 1, 2};

/* Keeps fds 0 to 4 open (on /dev/null when nothing else holds them), so that what PHP opens at
 * startup (OPcache's lock file) and the fds a message brings never take the numbers a child
 * moves its own fds to. */
void pg_template_reserve_fds(void)
{
	for (int fd = 0; fd <= 4; fd++) {
		if (fcntl(fd, F_GETFD) >= 0)
			continue;
		int null = open("/dev/null", O_RDWR);
		if (null >= 0 && null != fd) {
			dup2(null, fd);
			close(null);
		}
	}
}

static void reply(int32_t value)
{
	if (send(CONTROL_FD, &value, sizeof(value), MSG_NOSIGNAL) != (ssize_t)sizeof(value)) {
		fprintf(stderr, "peregrine-php: template: replying: %s\n", strerror(errno));
		exit(71);
	}
}

/* Reads the next message into fds: returns WORKER_FDS (their copies are ours to close), 0 at end
 * of file, -1 for a message without exactly WORKER_FDS fds (whatever it brought is closed). */
static int receive(int fds[WORKER_FDS])
{
	char byte;
	union {
		struct cmsghdr align;
		char buf[CMSG_SPACE(sizeof(int) * WORKER_FDS)];
	} control;
	struct iovec iov = {.iov_base = &byte, .iov_len = 1};
	struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.buf,
			     .msg_controllen = sizeof(control.buf)};
	ssize_t n;

	do
		n = recvmsg(CONTROL_FD, &msg, MSG_CMSG_CLOEXEC);
	while (n < 0 && errno == EINTR);
	if (n < 0) {
		fprintf(stderr, "peregrine-php: template: reading the control socket: %s\n", strerror(errno));
		exit(71);
	}
	if (n == 0)
		return 0;
	int count = 0;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c != NULL; c = CMSG_NXTHDR(&msg, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		int got = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
		int *in = (int *)CMSG_DATA(c);
		for (int i = 0; i < got; i++) {
			if (count < WORKER_FDS)
				fds[count++] = in[i];
			else
				close(in[i]);
		}
	}
	if (count == WORKER_FDS && !(msg.msg_flags & MSG_CTRUNC))
		return count;
	for (int i = 0; i < count; i++)
		close(fds[i]);
	return -1;
}

/* In the child: the fds go where a worker has them, the template's control socket goes, and the
 * child leaves the template's process group and dies with the server, as an exec'd worker. */
static void become_worker(const int fds[WORKER_FDS], pid_t server, const char *name)
{
	prctl(PR_SET_NAME, name);
	for (int i = 0; i < WORKER_FDS; i++) {
		if (dup2(fds[i], worker_fd[i]) < 0)
			_exit(71);
	}
	for (int i = 0; i < WORKER_FDS; i++)
		close(fds[i]);
	setpgid(0, 0); /* the server sets it too, so that a Kill never misses the group */
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != server) /* the server died before PR_SET_PDEATHSIG took effect */
		_exit(1);
}

/* Serves the control socket. Returns true in a forked child, which goes on as a worker; false
 * in the template once the socket is at its end. */
bool pg_template_serve(void)
{
	pid_t server = getppid();
	char name[16] = "";
	int fds[WORKER_FDS];
	int count;

	fcntl(CONTROL_FD, F_SETFD, FD_CLOEXEC);
	prctl(PR_GET_NAME, name); /* the workers keep it; ps and top show the template apart */
	prctl(PR_SET_NAME, TEMPLATE_NAME);
	reply((int32_t)getpid());
	while ((count = receive(fds)) != 0) {
		if (count < 0) {
			reply(-EINVAL);
			continue;
		}
		fflush(NULL); /* nothing buffered by the template may come out of a child */
		pid_t pid = (pid_t)syscall(SYS_clone, CLONE_PARENT | SIGCHLD, 0, 0, 0, 0);
		int err = errno;
		if (pid == 0) {
			become_worker(fds, server, name);
			return true;
		}
		for (int i = 0; i < WORKER_FDS; i++)
			close(fds[i]);
		reply(pid > 0 ? (int32_t)pid : -err);
	}
	return false;
}
