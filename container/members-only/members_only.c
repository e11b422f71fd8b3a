/*
 * Members-only ports: preloaded (LD_PRELOAD) into every process a job starts, this library's accept() and
 * accept4() hand the program a TCP connection only when its peer is loopback or one of the job's members;
 * any other connection is reset and the next one is accepted in its place. Everything the job's frameworks
 * listen with goes through these two functions of the C library (TensorFlow's gRPC, Open MPI's daemons,
 * PMIx and TCP transport, NCCL's sockets, Gloo, sshd: docs/architecture.md says how that was checked), so
 * no connection from outside the job reaches them, and nothing but accepting costs anything.
 *
 * The members are the addresses listed, one per line, in the job's members file: <run folder>/<name>, the
 * run folder being $RUN_DIR_VAR or DEFAULT_RUN_DIR. The launcher writes it from the addresses the hosts
 * proved membership of the job from, on the coordinator's authenticated connections, before any port of
 * the job opens. Until it exists no address but loopback is a member. A file written or replaced later is
 * read again when an address it may list knocks; an address once admitted stays so for the process.
 *
 * Connections of the local families (AF_UNIX) are the host's own and pass. Other families than
 * AF_INET/AF_INET6/AF_UNIX are refused.
 *
 * Build (container/build-steps/build-members-only): the names it shares with the launcher come from
 * sagetrain/contracts.py as -D definitions, so they are spelled once.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#if !defined(RUN_DIR_VAR) || !defined(DEFAULT_RUN_DIR) || !defined(MEMBERS_FILE_NAME)
#error "build with container/build-steps/build-members-only: it defines the names shared with sagetrain"
#endif

/* A members file is one address per line: a few hosts, hundreds at most. Larger is not ours. */
#define MAX_FILE_BYTES (1 << 20)

typedef int (*accept_fn)(int, struct sockaddr *, socklen_t *);
typedef int (*accept4_fn)(int, struct sockaddr *, socklen_t *, int);

/* One reading of the members file, never changed once published. A replaced file gives a new table; the
 * old one is left allocated, since another thread may still be reading it: the file is written once or
 * twice per job, so that is a few bytes. No lock is taken, so a fork in any thread leaves the child a
 * usable table. */
struct members {
    dev_t dev;
    ino_t ino;
    struct timespec mtime;
    off_t size;
    size_t count;
    struct in6_addr addresses[];
};

static _Atomic(struct members *) current_members;
static atomic_flag refusal_logged = ATOMIC_FLAG_INIT;

static void *next_symbol(const char *name) {
    return dlsym(RTLD_NEXT, name);
}

static int members_path(char *path, size_t size) {
    const char *run_dir = getenv(RUN_DIR_VAR);
    if (run_dir == NULL || run_dir[0] == '\0') {
        run_dir = DEFAULT_RUN_DIR;
    }
    int written = snprintf(path, size, "%s/%s", run_dir, MEMBERS_FILE_NAME);
    return written > 0 && (size_t)written < size;
}

static int same_file(const struct members *members, const struct stat *status) {
    return members->dev == status->st_dev && members->ino == status->st_ino &&
           members->size == status->st_size && members->mtime.tv_sec == status->st_mtim.tv_sec &&
           members->mtime.tv_nsec == status->st_mtim.tv_nsec;
}

/* An IPv4 address as IPv6 does it (::ffff:a.b.c.d), so every address compares the same way. */
static void mapped(struct in6_addr *out, const struct in_addr *address) {
    memset(out, 0, sizeof *out);
    out->s6_addr[10] = 0xff;
    out->s6_addr[11] = 0xff;
    memcpy(&out->s6_addr[12], &address->s_addr, 4);
}

static int parse_address(const char *text, struct in6_addr *out) {
    struct in_addr v4;
    if (inet_pton(AF_INET, text, &v4) == 1) {
        mapped(out, &v4);
        return 1;
    }
    return inet_pton(AF_INET6, text, out) == 1;
}

static char *read_whole(int fd, size_t size) {
    char *text = malloc(size + 1);
    if (text == NULL) {
        return NULL;
    }
    size_t done = 0;
    while (done < size) {
        ssize_t got = read(fd, text + done, size - done);
        if (got < 0 && errno == EINTR) {
            continue;
        }
        if (got <= 0) {
            break;
        }
        done += (size_t)got;
    }
    text[done] = '\0';
    return text;
}

/* The addresses of ``text``, one per line; a line that is not an address is left out. */
static struct members *parse_members(char *text, const struct stat *status) {
    size_t lines = 1;
    for (const char *c = text; *c; c++) {
        lines += *c == '\n';
    }
    struct members *members = malloc(sizeof *members + lines * sizeof(struct in6_addr));
    if (members == NULL) {
        return NULL;
    }
    members->dev = status->st_dev;
    members->ino = status->st_ino;
    members->mtime = status->st_mtim;
    members->size = status->st_size;
    members->count = 0;
    char *save = NULL;
    for (char *line = strtok_r(text, "\n", &save); line != NULL; line = strtok_r(NULL, "\n", &save)) {
        line[strcspn(line, " \t\r")] = '\0';
        if (parse_address(line, &members->addresses[members->count])) {
            members->count++;
        }
    }
    return members;
}

static struct members *read_members(const char *path) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return NULL;
    }
    struct stat status;
    struct members *members = NULL;
    if (fstat(fd, &status) == 0 && S_ISREG(status.st_mode) && status.st_size <= MAX_FILE_BYTES) {
        char *text = read_whole(fd, (size_t)status.st_size);
        if (text != NULL) {
            members = parse_members(text, &status);
            free(text);
        }
    }
    close(fd);
    return members;
}

/* The members as the file now lists them; NULL when there is no file (then no one is a member). */
static struct members *members_now(void) {
    char path[PATH_MAX];
    struct stat status;
    if (!members_path(path, sizeof path) || stat(path, &status) != 0) {
        return NULL;
    }
    struct members *members = atomic_load(&current_members);
    if (members != NULL && same_file(members, &status)) {
        return members;
    }
    struct members *fresh = read_members(path);
    if (fresh != NULL) {
        atomic_store(&current_members, fresh);
    }
    return fresh;
}

static int listed(const struct members *members, const struct in6_addr *address) {
    for (size_t i = 0; members != NULL && i < members->count; i++) {
        if (memcmp(&members->addresses[i], address, sizeof *address) == 0) {
            return 1;
        }
    }
    return 0;
}

/* A member of the list already read is taken without a system call (a stat costs more than the rest of
 * accepting: microseconds on some hosts); only an address not in it makes the file be looked at again.
 * During a job the list only grows (none, then every host), so that is all a change can bring. */
static int is_member(const struct in6_addr *address) {
    return listed(atomic_load(&current_members), address) || listed(members_now(), address);
}

static int is_loopback(const struct in6_addr *address) {
    static const unsigned char v4_mapped_prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (memcmp(address->s6_addr, v4_mapped_prefix, 12) == 0) {
        return address->s6_addr[12] == 127; /* 127.0.0.0/8 */
    }
    return IN6_IS_ADDR_LOOPBACK(address);
}

/* The peer as an IPv6 address; 0 for a family that has none. */
static int peer_address(const struct sockaddr_storage *peer, struct in6_addr *out) {
    if (peer->ss_family == AF_INET) {
        mapped(out, &((const struct sockaddr_in *)peer)->sin_addr);
        return 1;
    }
    if (peer->ss_family == AF_INET6) {
        *out = ((const struct sockaddr_in6 *)peer)->sin6_addr;
        return 1;
    }
    return 0;
}

static int admitted(const struct sockaddr_storage *peer) {
    if (peer->ss_family == AF_UNIX) {
        return 1;
    }
    struct in6_addr address;
    if (!peer_address(peer, &address)) {
        return 0;
    }
    return is_loopback(&address) || is_member(&address);
}

static int stderr_takes_lines(void) {
    struct stat status;
    /* Never into a socket: a daemon whose descriptor 2 is one would get our words in its protocol. */
    return fstat(STDERR_FILENO, &status) == 0 &&
           (S_ISFIFO(status.st_mode) || S_ISCHR(status.st_mode) || S_ISREG(status.st_mode));
}

static int local_port(int listener) {
    struct sockaddr_storage local;
    socklen_t length = sizeof local;
    if (getsockname(listener, (struct sockaddr *)&local, &length) != 0) {
        return -1;
    }
    if (local.ss_family == AF_INET) {
        return ntohs(((struct sockaddr_in *)&local)->sin_port);
    }
    if (local.ss_family == AF_INET6) {
        return ntohs(((struct sockaddr_in6 *)&local)->sin6_port);
    }
    return -1;
}

/* The first refusal of a process is said once on its stderr; the rest are not (an outsider could
 * otherwise fill the job's log). */
static void log_refusal(int listener, const struct sockaddr_storage *peer) {
    if (atomic_flag_test_and_set(&refusal_logged) || !stderr_takes_lines()) {
        return;
    }
    char text[INET6_ADDRSTRLEN] = "an address of another family";
    struct in6_addr address;
    if (peer_address(peer, &address)) {
        inet_ntop(AF_INET6, &address, text, sizeof text);
        if (strncmp(text, "::ffff:", 7) == 0 && strchr(text, '.') != NULL) {
            memmove(text, text + 7, strlen(text + 7) + 1);
        }
    }
    char line[512];
    int length = snprintf(
        line, sizeof line,
        "sagetrain: %s (pid %d) refused a connection from %s to port %d: that address is not one of the "
        "job's hosts; further refusals of this process are not logged\n",
        program_invocation_short_name, (int)getpid(), text, local_port(listener));
    if (length > 0) {
        size_t size = (size_t)length < sizeof line ? (size_t)length : sizeof line - 1;
        ssize_t ignored = write(STDERR_FILENO, line, size);
        (void)ignored;
    }
}

/* Reset, not closed: the peer learns at once that it was turned away, and no TIME_WAIT is left here.
 * Said before the reset: a peer that tries another port once it sees the reset cannot have that refusal
 * said first (the line names the first refusal of the process). */
static void refuse(int listener, int connection, const struct sockaddr_storage *peer) {
    log_refusal(listener, peer);
    struct linger reset = {.l_onoff = 1, .l_linger = 0};
    setsockopt(connection, SOL_SOCKET, SO_LINGER, &reset, sizeof reset);
    close(connection);
}

/* The caller's address buffer, filled as the kernel fills it: at most *length bytes, *length set to the
 * address's whole size. */
static void give_address(const struct sockaddr_storage *peer, socklen_t peer_length,
                         struct sockaddr *address, socklen_t *length) {
    if (address == NULL) {
        return;
    }
    memcpy(address, peer, peer_length < *length ? peer_length : *length);
    *length = peer_length;
}

static int accept_member(int listener, struct sockaddr *address, socklen_t *length, int flags,
                         int with_flags) {
    static _Atomic(accept4_fn) real_accept4;
    static _Atomic(accept_fn) real_accept;
    if (address != NULL && length == NULL) {
        errno = EFAULT;
        return -1;
    }
    accept4_fn next4 = atomic_load(&real_accept4);
    accept_fn next = atomic_load(&real_accept);
    if (with_flags && next4 == NULL) {
        next4 = (accept4_fn)next_symbol("accept4");
        atomic_store(&real_accept4, next4);
    }
    if (!with_flags && next == NULL) {
        next = (accept_fn)next_symbol("accept");
        atomic_store(&real_accept, next);
    }
    if ((with_flags && next4 == NULL) || (!with_flags && next == NULL)) {
        errno = ENOSYS;
        return -1;
    }
    for (;;) {
        struct sockaddr_storage peer;
        socklen_t peer_length = sizeof peer;
        int connection = with_flags ? next4(listener, (struct sockaddr *)&peer, &peer_length, flags)
                                    : next(listener, (struct sockaddr *)&peer, &peer_length);
        if (connection < 0) {
            return connection;
        }
        int saved = errno;
        if (admitted(&peer)) {
            errno = saved;
            give_address(&peer, peer_length, address, length);
            return connection;
        }
        /* As if the refused connection had never come: a non-blocking listener (the frameworks', sshd's)
         * says EAGAIN when no other waits, a blocking one waits for the next. No error is made up: a
         * program's accept loop that stops on an error would hand an outsider a way to stop it. */
        refuse(listener, connection, &peer);
        errno = saved;
    }
}

#define EXPORTED __attribute__((visibility("default")))

EXPORTED int accept(int listener, struct sockaddr *address, socklen_t *length) {
    return accept_member(listener, address, length, 0, 0);
}

EXPORTED int accept4(int listener, struct sockaddr *address, socklen_t *length, int flags) {
    return accept_member(listener, address, length, flags, 1);
}
