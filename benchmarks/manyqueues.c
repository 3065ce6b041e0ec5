/*
 * manyqueues: amqbench's "many queues" case (issue 14): P producers and C consumers over Q queues,
 * each a connection and thread of its own, transient messages, no-ack consumers. Producer p
 * publishes round-robin to the queues q with q % P == p; consumer c consumes (one channel, one
 * basic.consume per queue) the queues q with (q % P + q / P) % C == c. With Q = 100 and
 * P = C = 10, every queue has one producer and one consumer, and each consumer drains ten
 * queues fed by ten different producers.
 *
 * Options and the machine-readable last line are amqbench's (../shared/bench/README.md), plus
 * --queues Q (default 100); queues are named <--queue>-0 .. <--queue>-(Q-1), declared fresh and
 * deleted at the end. Every body starts with the CLOCK_MONOTONIC send time (ns) for latency.
 *
 * Build: gcc -O2 -Wall -o manyqueues manyqueues.c -lrabbitmq -lpthread   (Debian: librabbitmq-dev)
 */
#include <amqp.h>
#include <amqp_tcp_socket.h>
#include <getopt.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_SAMPLES (4u << 20)
#define MAX_QUEUES 1000
#define MAX_THREADS 256

static struct {
    const char *host, *user, *pass, *vhost, *queue;
    int port, size, seconds, producers, consumers, queues;
} opt = {"127.0.0.1", "guest", "guest", "/", "manyq", 5672, 1024, 10, 10, 10, 100};

static char names[MAX_QUEUES][64];
static volatile int stop_publishing, stop_consuming;
static uint64_t published_total, consumed_total, consumed_live, samples_n;
static uint32_t *samples; /* latency in microseconds */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void check(amqp_rpc_reply_t r, const char *what) {
    if (r.reply_type == AMQP_RESPONSE_NORMAL) return;
    fprintf(stderr, "manyqueues: %s failed (reply type %d)\n", what, r.reply_type);
    exit(1);
}

static amqp_connection_state_t open_connection(void) {
    amqp_connection_state_t conn = amqp_new_connection();
    amqp_socket_t *sock = amqp_tcp_socket_new(conn);
    if (!sock || amqp_socket_open(sock, opt.host, opt.port)) {
        fprintf(stderr, "manyqueues: cannot connect to %s:%d\n", opt.host, opt.port);
        exit(1);
    }
    check(amqp_login(conn, opt.vhost, 0, 131072, 0, AMQP_SASL_METHOD_PLAIN, opt.user, opt.pass), "login");
    amqp_channel_open(conn, 1);
    check(amqp_get_rpc_reply(conn), "channel.open");
    return conn;
}

static void close_connection(amqp_connection_state_t conn) {
    amqp_channel_close(conn, 1, AMQP_REPLY_SUCCESS);
    amqp_connection_close(conn, AMQP_REPLY_SUCCESS);
    amqp_destroy_connection(conn);
}

static void *producer(void *arg) {
    int p = (int)(intptr_t)arg;
    amqp_connection_state_t conn = open_connection();
    char *body = calloc(1, (size_t)opt.size);
    amqp_basic_properties_t props = {._flags = AMQP_BASIC_DELIVERY_MODE_FLAG, .delivery_mode = 1};
    amqp_bytes_t bytes = {(size_t)opt.size, body};
    uint64_t published = 0;
    int q = p;
    while (!stop_publishing) {
        uint64_t t = now_ns();
        memcpy(body, &t, sizeof t);
        if (amqp_basic_publish(conn, 1, amqp_empty_bytes, amqp_cstring_bytes(names[q]), 0, 0, &props,
                               bytes) != AMQP_STATUS_OK) {
            fprintf(stderr, "manyqueues: publish failed\n");
            exit(1);
        }
        published++;
        q += opt.producers;
        if (q >= opt.queues) q = p;
    }
    pthread_mutex_lock(&lock);
    published_total += published;
    pthread_mutex_unlock(&lock);
    free(body);
    close_connection(conn);
    return NULL;
}

static void *consumer(void *arg) {
    int c = (int)(intptr_t)arg;
    amqp_connection_state_t conn = open_connection();
    for (int q = 0; q < opt.queues; q++) {
        if ((q % opt.producers + q / opt.producers) % opt.consumers != c) continue;
        amqp_basic_consume(conn, 1, amqp_cstring_bytes(names[q]), amqp_empty_bytes, 0, 1, 0,
                           amqp_empty_table);
        check(amqp_get_rpc_reply(conn), "basic.consume");
    }
    uint32_t *mine = malloc(sizeof(uint32_t) * MAX_SAMPLES);
    uint64_t consumed = 0, n = 0;
    while (!stop_consuming) {
        amqp_envelope_t env;
        struct timeval tv = {0, 100000};
        amqp_maybe_release_buffers(conn);
        amqp_rpc_reply_t r = amqp_consume_message(conn, &env, &tv, 0);
        if (r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION && r.library_error == AMQP_STATUS_TIMEOUT)
            continue;
        check(r, "consume");
        uint64_t sent = 0, t = now_ns();
        if (env.message.body.len >= sizeof sent) memcpy(&sent, env.message.body.bytes, sizeof sent);
        if (sent && t > sent && n < MAX_SAMPLES) mine[n++] = (uint32_t)((t - sent) / 1000u);
        consumed++;
        __atomic_fetch_add(&consumed_live, 1, __ATOMIC_RELAXED);
        amqp_destroy_envelope(&env);
    }
    pthread_mutex_lock(&lock);
    consumed_total += consumed;
    for (uint64_t i = 0; i < n && samples_n < MAX_SAMPLES; i++) samples[samples_n++] = mine[i];
    pthread_mutex_unlock(&lock);
    free(mine);
    close_connection(conn);
    return NULL;
}

static int by_value(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

static uint32_t percentile(double p) {
    return samples_n ? samples[(uint64_t)(p * (double)(samples_n - 1))] : 0;
}

static void usage(void) {
    fprintf(stderr, "usage: manyqueues [--host H] [--port P] [--user U] [--pass P] [--vhost V]\n"
                    "                  [--queue PREFIX] [--queues N<=1000] [--size BYTES>=8]\n"
                    "                  [--seconds N<=60] [--producers N] [--consumers N]\n");
    exit(2);
}

int main(int argc, char **argv) {
    static struct option longopts[] = {
        {"host", 1, 0, 'h'},      {"port", 1, 0, 'P'},    {"user", 1, 0, 'u'},
        {"pass", 1, 0, 'w'},      {"vhost", 1, 0, 'v'},   {"queue", 1, 0, 'q'},
        {"size", 1, 0, 's'},      {"seconds", 1, 0, 't'}, {"producers", 1, 0, 'x'},
        {"consumers", 1, 0, 'y'}, {"queues", 1, 0, 'Q'},  {0, 0, 0, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (c) {
        case 'h': opt.host = optarg; break;
        case 'P': opt.port = atoi(optarg); break;
        case 'u': opt.user = optarg; break;
        case 'w': opt.pass = optarg; break;
        case 'v': opt.vhost = optarg; break;
        case 'q': opt.queue = optarg; break;
        case 's': opt.size = atoi(optarg); break;
        case 't': opt.seconds = atoi(optarg); break;
        case 'x': opt.producers = atoi(optarg); break;
        case 'y': opt.consumers = atoi(optarg); break;
        case 'Q': opt.queues = atoi(optarg); break;
        default: usage();
        }
    }
    if (opt.seconds < 1 || opt.seconds > 60 || opt.size < 8 || opt.producers < 1 || opt.consumers < 1 ||
        opt.queues < 1 || opt.queues > MAX_QUEUES || opt.producers + opt.consumers > MAX_THREADS ||
        opt.queues < opt.producers || opt.queues < opt.consumers || strlen(opt.queue) > 40)
        usage();
    samples = malloc(sizeof(uint32_t) * MAX_SAMPLES);

    /* Fresh queues: delete any left over (a missing queue is fine), then declare. */
    amqp_connection_state_t admin = open_connection();
    for (int q = 0; q < opt.queues; q++) {
        snprintf(names[q], sizeof names[q], "%s-%d", opt.queue, q);
        amqp_queue_delete(admin, 1, amqp_cstring_bytes(names[q]), 0, 0);
        check(amqp_get_rpc_reply(admin), "queue.delete");
        amqp_queue_declare(admin, 1, amqp_cstring_bytes(names[q]), 0, 0, 0, 0, amqp_empty_table);
        check(amqp_get_rpc_reply(admin), "queue.declare");
    }

    pthread_t threads[MAX_THREADS];
    int n = 0;
    for (int i = 0; i < opt.consumers; i++)
        pthread_create(&threads[n++], NULL, consumer, (void *)(intptr_t)i);
    struct timespec settle = {0, 500000000};
    nanosleep(&settle, NULL);
    uint64_t start = now_ns();
    for (int i = 0; i < opt.producers; i++)
        pthread_create(&threads[n++], NULL, producer, (void *)(intptr_t)i);
    struct timespec run = {opt.seconds, 0};
    nanosleep(&run, NULL);
    stop_publishing = 1;
    for (int i = opt.consumers; i < n; i++) pthread_join(threads[i], NULL);
    double publish_seconds = (double)(now_ns() - start) / 1e9;
    /* let consumers drain what was published, for at most 5 s */
    uint64_t drain_deadline = now_ns() + 5000000000u;
    while (__atomic_load_n(&consumed_live, __ATOMIC_RELAXED) < published_total && now_ns() < drain_deadline) {
        struct timespec beat = {0, 10000000};
        nanosleep(&beat, NULL);
    }
    double seconds = (double)(now_ns() - start) / 1e9;
    stop_consuming = 1;
    for (int i = 0; i < opt.consumers; i++) pthread_join(threads[i], NULL);
    for (int q = 0; q < opt.queues; q++) {
        amqp_queue_delete(admin, 1, amqp_cstring_bytes(names[q]), 0, 0);
        check(amqp_get_rpc_reply(admin), "queue.delete");
    }
    close_connection(admin);

    qsort(samples, samples_n, sizeof(uint32_t), by_value);
    printf("published=%llu consumed=%llu seconds=%.2f published_per_s=%.0f consumed_per_s=%.0f "
           "p50_us=%u p99_us=%u p999_us=%u\n",
           (unsigned long long)published_total, (unsigned long long)consumed_total, seconds,
           (double)published_total / publish_seconds, (double)consumed_total / seconds, percentile(0.50),
           percentile(0.99), percentile(0.999));
    return consumed_total == published_total ? 0 : 3;
}
