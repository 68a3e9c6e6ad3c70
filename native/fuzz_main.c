/* fuzz_main.c: a small standalone mutator for fuzz targets, for machines without clang's
 * libFuzzer (make fuzz-http).
 *
 *   fuzz-http SECONDS CRASH-PREFIX CORPUS-DIR...
 *
 * It runs every corpus file, then random mutations of them (byte changes, HTTP tokens
 * inserted, ranges deleted or repeated, splices of two files) until SECONDS pass. No coverage
 * feedback: it finds what random edits near valid requests find. The input that crashes is
 * written to CRASH-PREFIX + a number before the process dies. */
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_MAX_INPUT 8192
#define FUZZ_MAX_SEEDS 1024

static uint8_t cur[FUZZ_MAX_INPUT];
static size_t cur_len;
static const char *crash_prefix;

static void save_crash(void)
{
	char name[512];
	snprintf(name, sizeof name, "%s%ld", crash_prefix, (long)getpid());
	int fd = open(name, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd >= 0) {
		if (write(fd, cur, cur_len) < 0) {
			/* nothing more to do while dying */
		}
		close(fd);
	}
	static const char msg[] = "fuzz-http: crashing input saved\n";
	if (write(2, msg, sizeof msg - 1) < 0) {
		/* as above */
	}
}

static void on_signal(int sig)
{
	save_crash();
	signal(sig, SIG_DFL);
	raise(sig);
}

static const char *const dict[] = {
	"\r\n", "\n", "\r", " ", "\t", ":", ";", "%", "0\r\n\r\n", "\r\n\r\n", "Host: x\r\n",
	"Transfer-Encoding: chunked\r\n", "Content-Length: 5\r\n", "Content-Length: ", "HTTP/1.1",
	"HTTP/1.0", "Connection: close\r\n", "Connection: keep-alive\r\n", "Expect: 100-continue\r\n",
	"ffffffffffffffff", "9223372036854775808", "5;a=b\r\nhello\r\n", "GET / HTTP/1.1\r\n", "\x00",
	"\x7f", "\xff", "http://h:80/p?q", "CONNECT ", "*", "[::1]",
};

static uint8_t *seed[FUZZ_MAX_SEEDS];
static size_t seed_len[FUZZ_MAX_SEEDS], nseeds;

static void load(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	if (!d)
		return;
	while ((e = readdir(d)) && nseeds < FUZZ_MAX_SEEDS) {
		char path[1024];
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
		FILE *f = fopen(path, "rb");
		if (!f)
			continue;
		seed[nseeds] = malloc(FUZZ_MAX_INPUT);
		seed_len[nseeds] = fread(seed[nseeds], 1, FUZZ_MAX_INPUT, f);
		fclose(f);
		nseeds++;
	}
	closedir(d);
}

static void insert(const uint8_t *s, size_t n, size_t at)
{
	if (cur_len + n > FUZZ_MAX_INPUT)
		return;
	memmove(cur + at + n, cur + at, cur_len - at);
	memcpy(cur + at, s, n);
	cur_len += n;
}

static void mutate(void)
{
	int edits = 1 + rand() % 6;
	for (int i = 0; i < edits; i++) {
		size_t at = cur_len ? (size_t)rand() % (cur_len + 1) : 0;
		switch (rand() % 6) {
		case 0:
			if (at < cur_len)
				cur[at] = (uint8_t)rand();
			break;
		case 1:
			if (at < cur_len)
				cur[at] ^= (uint8_t)(1 << rand() % 8);
			break;
		case 2: {
			const char *t = dict[rand() % (sizeof dict / sizeof dict[0])];
			insert((const uint8_t *)t, strlen(t) ? strlen(t) : 1, at);
			break;
		}
		case 3: {
			size_t n = (size_t)rand() % 16;
			if (at + n > cur_len)
				n = cur_len - at;
			memmove(cur + at, cur + at + n, cur_len - at - n);
			cur_len -= n;
			break;
		}
		case 4: {
			uint8_t tmp[64];
			size_t n = (size_t)rand() % sizeof tmp;
			if (at + n > cur_len)
				n = cur_len - at;
			memcpy(tmp, cur + at, n);
			insert(tmp, n, (size_t)rand() % (cur_len + 1));
			break;
		}
		default: {
			size_t k = (size_t)rand() % nseeds, n = seed_len[k];
			size_t from = n ? (size_t)rand() % n : 0;
			insert(seed[k] + from, n - from, at);
			break;
		}
		}
	}
}

int main(int argc, char **argv)
{
	if (argc < 4) {
		fprintf(stderr, "usage: %s SECONDS CRASH-PREFIX CORPUS-DIR...\n", argv[0]);
		return 2;
	}
	double seconds = atof(argv[1]);
	crash_prefix = argv[2];
	for (int i = 3; i < argc; i++)
		load(argv[i]);
	if (nseeds == 0) {
		fprintf(stderr, "fuzz-http: empty corpus\n");
		return 2;
	}
	signal(SIGABRT, on_signal);
	signal(SIGSEGV, on_signal);
#if defined(__SANITIZE_ADDRESS__)
	__sanitizer_set_death_callback(save_crash);
#endif
	for (size_t i = 0; i < nseeds; i++) {
		memcpy(cur, seed[i], cur_len = seed_len[i]);
		LLVMFuzzerTestOneInput(cur, cur_len);
	}
	srand((unsigned)time(NULL) ^ (unsigned)getpid());
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	unsigned long runs = 0;
	for (;;) {
		size_t k = (size_t)rand() % nseeds;
		memcpy(cur, seed[k], cur_len = seed_len[k]);
		mutate();
		LLVMFuzzerTestOneInput(cur, cur_len);
		if (++runs % 1024 == 0) {
			clock_gettime(CLOCK_MONOTONIC, &t);
			if ((double)(t.tv_sec - t0.tv_sec) + (double)(t.tv_nsec - t0.tv_nsec) / 1e9 >= seconds)
				break;
		}
	}
	printf("fuzz-http: %lu inputs from %zu seeds, no crash\n", runs, nseeds);
	for (size_t i = 0; i < nseeds; i++)
		free(seed[i]);
	return 0;
}
