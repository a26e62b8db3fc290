/*
 * nfq_delay: fixed one-way packet delay for scripts/simcluster.
 *
 * Why this exists: the simulated cluster runs on a kernel without sch_netem, so
 * a link delay cannot be made with `tc qdisc ... netem delay`. Instead an
 * iptables rule in a host's network namespace sends its outgoing packets to an
 * NFQUEUE, and this daemon (running in that same namespace) holds each packet
 * for a fixed time before it gives the kernel an ACCEPT verdict.
 *
 * Usage: nfq_delay [-p PIDFILE] QUEUE:DELAY_US [QUEUE:DELAY_US ...]
 *   Binds each NFQUEUE number QUEUE and delays its packets by DELAY_US
 *   microseconds. Writes PIDFILE only once every queue is bound, so the
 *   caller can wait for the file to know the delay is in force.
 *   SIGTERM/SIGINT: release every held packet and exit 0.
 *
 * Design notes (why, not what):
 *  - Only packet metadata is copied to userspace (NFQNL_COPY_META): the
 *    payload is never looked at, which keeps the cost per packet small.
 *  - NFQA_CFG_F_GSO: take TCP super-packets as they are instead of making the
 *    kernel segment them first (the segmentation would cost CPU on a 2-core
 *    machine and multiply the number of verdicts).
 *  - NFQA_CFG_F_FAIL_OPEN: if the queue or the socket buffer overflows, the
 *    kernel accepts the packet undelayed instead of dropping it. A dropped
 *    packet would cost a TCP retransmission timeout, far worse than one
 *    packet that skips the delay.
 *  - Every packet of a queue waits the same time, so packets leave in arrival
 *    order, and one batch verdict ("accept every id up to N") releases all
 *    packets that are due: one syscall per wake-up instead of one per packet.
 *  - Timer slack is set to 1 ns so that sub-millisecond delays (100us) are
 *    not rounded up by the default 50 us slack. Even so a timed sleep ends
 *    tens of microseconds late here (measured: a 100 us ppoll took 135 us in
 *    this VM), so the daemon learns its typical oversleep and wakes that much
 *    earlier; packets within that margin of their due time are released on
 *    the same wake-up rather than paying a second one. The estimate tracks a
 *    low quantile (falls fast, rises slowly), so preemption on a busy machine
 *    does not inflate it, and it never exceeds half the smallest delay (nor
 *    100 us): every packet is really held for at least half its delay, and
 *    there are always timed sleeps left to learn from.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <linux/netfilter.h>
#include <linux/netlink.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <libnetfilter_queue/libnetfilter_queue.h>

#ifndef SOL_NETLINK
#define SOL_NETLINK 270
#endif

#define MAX_QUEUES 8
#define RING_CAP 65536u /* packets held per queue; more are accepted undelayed */

struct held {
    uint32_t id;
    uint64_t due_ns;
};

struct queue {
    struct nfq_q_handle *qh;
    uint16_t num;
    uint64_t delay_ns;
    struct held *ring;
    uint32_t head, tail; /* ring indices, tail - head = packets held */
};

static struct queue queues[MAX_QUEUES];
static uint64_t oversleep_ns;  /* learnt timer lateness (starts at 0: never early) */
static uint64_t oversleep_cap; /* min(smallest delay / 2, 100 us) */
static int nqueues;
static volatile sig_atomic_t stop;

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void on_signal(int sig) {
    (void)sig;
    stop = 1;
}

static int on_packet(struct nfq_q_handle *qh, struct nfgenmsg *msg, struct nfq_data *nfa,
                     void *data) {
    (void)msg;
    struct queue *q = data;
    struct nfqnl_msg_packet_hdr *ph = nfq_get_msg_packet_hdr(nfa);
    if (!ph) return 0;
    uint32_t id = ntohl(ph->packet_id);
    if (q->tail - q->head >= RING_CAP) {
        /* Full: let it through now rather than drop it (see FAIL_OPEN above). */
        nfq_set_verdict(qh, id, NF_ACCEPT, 0, NULL);
        return 0;
    }
    struct held *h = &q->ring[q->tail % RING_CAP];
    h->id = id;
    h->due_ns = now_ns() + q->delay_ns;
    q->tail++;
    return 0;
}

/* Releases every packet due by `now`; returns the earliest remaining due time (0: none). */
static uint64_t release_due(uint64_t now, int all) {
    uint64_t next = 0;
    for (int i = 0; i < nqueues; i++) {
        struct queue *q = &queues[i];
        uint32_t last = 0;
        int any = 0;
        while (q->head != q->tail) {
            struct held *h = &q->ring[q->head % RING_CAP];
            if (!all && h->due_ns > now) break;
            last = h->id;
            any = 1;
            q->head++;
        }
        if (any) nfq_set_verdict_batch(q->qh, last, NF_ACCEPT);
        if (q->head != q->tail) {
            uint64_t due = q->ring[q->head % RING_CAP].due_ns;
            if (next == 0 || due < next) next = due;
        }
    }
    return next;
}

static void usage(void) {
    fprintf(stderr, "usage: nfq_delay [-p PIDFILE] QUEUE:DELAY_US [QUEUE:DELAY_US ...]\n");
    exit(2);
}

int main(int argc, char **argv) {
    const char *pidfile = NULL;
    int opt;
    while ((opt = getopt(argc, argv, "p:")) != -1) {
        if (opt == 'p') pidfile = optarg;
        else usage();
    }
    if (optind >= argc || argc - optind > MAX_QUEUES) usage();

    prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);

    struct nfq_handle *h = nfq_open();
    if (!h) { perror("nfq_open"); return 1; }
    /* Harmless failures on current kernels; kept for old ones that need a rebind. */
    nfq_unbind_pf(h, AF_INET);
    if (nfq_bind_pf(h, AF_INET) < 0) { perror("nfq_bind_pf"); return 1; }

    for (int i = optind; i < argc; i++) {
        unsigned qnum;
        unsigned long long delay_us;
        if (sscanf(argv[i], "%u:%llu", &qnum, &delay_us) != 2 || qnum > 65535) usage();
        struct queue *q = &queues[nqueues++];
        q->num = (uint16_t)qnum;
        q->delay_ns = delay_us * 1000ull;
        q->ring = calloc(RING_CAP, sizeof *q->ring);
        if (!q->ring) { perror("calloc"); return 1; }
        q->qh = nfq_create_queue(h, q->num, on_packet, q);
        if (!q->qh) { fprintf(stderr, "nfq_create_queue %u: %s\n", qnum, strerror(errno)); return 1; }
        if (nfq_set_mode(q->qh, NFQNL_COPY_META, 0) < 0) { perror("nfq_set_mode"); return 1; }
        uint32_t flags = NFQA_CFG_F_GSO | NFQA_CFG_F_FAIL_OPEN;
        if (nfq_set_queue_flags(q->qh, flags, flags) < 0) { perror("nfq_set_queue_flags"); return 1; }
        nfq_set_queue_maxlen(q->qh, RING_CAP);
    }

    oversleep_cap = 100000;
    for (int i = 0; i < nqueues; i++)
        if (queues[i].delay_ns / 2 < oversleep_cap) oversleep_cap = queues[i].delay_ns / 2;

    int fd = nfq_fd(h);
    /* A large receive buffer absorbs bursts while we sleep; with NO_ENOBUFS an
     * overflow is not reported as an error (the kernel fails open instead). */
    nfnl_rcvbufsiz(nfq_nfnlh(h), 8u << 20);
    int one = 1;
    setsockopt(fd, SOL_NETLINK, NETLINK_NO_ENOBUFS, &one, sizeof one);

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGHUP, SIG_IGN);
    signal(SIGPIPE, SIG_IGN);

    if (pidfile) {
        /* Written last: its presence tells the caller every queue is bound. */
        char tmp[4096];
        snprintf(tmp, sizeof tmp, "%s.tmp", pidfile);
        FILE *f = fopen(tmp, "w");
        if (!f || fprintf(f, "%d\n", (int)getpid()) < 0 || fclose(f) != 0 || rename(tmp, pidfile) != 0) {
            perror("pidfile");
            return 1;
        }
    }

    static char buf[1 << 18] __attribute__((aligned(8)));
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    while (!stop) {
        /* Anything due before we could sleep and wake again goes now. */
        uint64_t next = release_due(now_ns() + oversleep_ns, 0);
        struct timespec ts, *tsp = NULL;
        uint64_t wake_at = 0; /* 0: no timed sleep to learn from */
        if (next) {
            uint64_t now = now_ns();
            uint64_t target = next - oversleep_ns;
            uint64_t wait = target > now ? target - now : 0;
            if (wait) wake_at = target;
            ts.tv_sec = (time_t)(wait / 1000000000ull);
            ts.tv_nsec = (long)(wait % 1000000000ull);
            tsp = &ts;
        }
        int r = ppoll(&pfd, 1, tsp, NULL);
        if (r < 0) {
            if (errno == EINTR) continue;
            perror("ppoll");
            break;
        }
        if (r == 0 && wake_at) {
            /* Timer wake-up: learn how late it was. Down fast, up slowly:
             * a low quantile of the lateness, robust to preemption outliers. */
            uint64_t now = now_ns();
            uint64_t late = now > wake_at ? now - wake_at : 0;
            if (late < oversleep_ns) oversleep_ns -= (oversleep_ns - late) / 4;
            else oversleep_ns += (late - oversleep_ns) / 32;
            if (oversleep_ns > oversleep_cap) oversleep_ns = oversleep_cap;
            continue;
        }
        if (r == 0) continue;
        for (;;) { /* drain everything queued before going back to sleep */
            ssize_t n = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
            if (n < 0) {
                if (errno == EINTR) continue;
                if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS) break;
                perror("recv");
                stop = 1;
                break;
            }
            nfq_handle_packet(h, buf, (int)n);
        }
    }
    release_due(0, 1); /* never leave packets stranded in the kernel */
    for (int i = 0; i < nqueues; i++) nfq_destroy_queue(queues[i].qh);
    nfq_close(h);
    if (pidfile) unlink(pidfile);
    return 0;
}
