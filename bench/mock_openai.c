/* A fast OpenAI-compatible streaming mock with known timing, for load-generator benchmarks.

   Every POST to .../completions or .../chat/completions streams max_tokens (or max_completion_tokens, default
   --tokens) one-token chunks: the first --ttft-ms after the request was read, then one every --itl-ms, on an
   absolute schedule (no drift). A running usage count is on every chunk when stream_options asks for
   continuous_usage_stats, a usage chunk ends the stream when it asks for include_usage. The mock records its own
   stamps, the truth the clients' figures are compared with: one line per request, appended to --stamps,
       <request read> <chunk 1 written> ... <chunk n written>      (CLOCK_MONOTONIC ns, Python's time.monotonic)
   GET /_flush flushes that file. C with the standard library and Linux only (epoll, timerfd, SO_REUSEPORT): one
   event loop per --threads, each with its own listening socket, so it keeps up with any Python client.

       cc -O2 -pthread -o mock_openai bench/mock_openai.c
       ./mock_openai --port 8123 --ttft-ms 20 --itl-ms 5 --threads 1 --stamps /tmp/stamps.txt [--text " a"]
                     [--prompt-tokens N: the prompt length usage reports; the mock does not tokenize]
   It prints "listening <port>" when ready and serves until killed (SIGTERM flushes the stamps). */
#define _GNU_SOURCE
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

static int64_t ttft_ns = 20000000, itl_ns = 5000000;
static int default_tokens = 16, port = 0, prompt_tokens = 0;
static const char *text = " a";
static FILE *stamps;
static pthread_mutex_t stamps_lock = PTHREAD_MUTEX_INITIALIZER;

static int64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

typedef struct conn {
    int fd, heap_at;  /* heap_at: index in the timer heap, -1 when no chunk is due */
    char *in; size_t in_len, in_cap;
    char *out; size_t out_len, out_cap;  /* bytes the socket did not take yet */
    int active, chat, running_usage, include_usage, close_after, tokens, sent;
    int64_t received, due;
    int64_t *written;  /* each chunk's write stamp */
} conn;

typedef struct worker { int epoll, listener, timer; conn **heap; int heap_len, heap_cap; } worker;

static void append(conn *c, const char *data, size_t n) {
    if (c->out_len + n > c->out_cap) {
        c->out_cap = (c->out_len + n) * 2;
        c->out = realloc(c->out, c->out_cap);
    }
    memcpy(c->out + c->out_len, data, n);
    c->out_len += n;
}

/* Write what is buffered; keep the rest for EPOLLOUT. Returns -1 when the peer is gone. */
static int flush_out(worker *w, conn *c) {
    while (c->out_len) {
        ssize_t n = write(c->fd, c->out, c->out_len);
        if (n < 0) {
            if (errno == EAGAIN) {
                struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT, .data.ptr = c};
                epoll_ctl(w->epoll, EPOLL_CTL_MOD, c->fd, &ev);
                return 0;
            }
            return -1;
        }
        memmove(c->out, c->out + n, c->out_len - n);
        c->out_len -= n;
    }
    return 0;
}

static void send_raw(worker *w, conn *c, const char *data, size_t n) {
    append(c, data, n);
    if (c->out_len == n) flush_out(w, c);
}

static void sse(worker *w, conn *c, const char *payload) {
    char frame[1024];
    size_t len = strlen(payload) + 8;  /* "data: " + payload + "\n\n" */
    int n = snprintf(frame, sizeof frame, "%zx\r\ndata: %s\n\n\r\n", len, payload);
    send_raw(w, c, frame, (size_t)n);
}

/* ---- the timer heap: the connection whose next chunk is due soonest on top ---- */

static void heap_swap(worker *w, int a, int b) {
    conn *t = w->heap[a]; w->heap[a] = w->heap[b]; w->heap[b] = t;
    w->heap[a]->heap_at = a; w->heap[b]->heap_at = b;
}

static void heap_up(worker *w, int i) {
    while (i && w->heap[(i - 1) / 2]->due > w->heap[i]->due) { heap_swap(w, i, (i - 1) / 2); i = (i - 1) / 2; }
}

static void heap_down(worker *w, int i) {
    for (;;) {
        int l = 2 * i + 1, r = l + 1, m = i;
        if (l < w->heap_len && w->heap[l]->due < w->heap[m]->due) m = l;
        if (r < w->heap_len && w->heap[r]->due < w->heap[m]->due) m = r;
        if (m == i) return;
        heap_swap(w, i, m); i = m;
    }
}

static void heap_push(worker *w, conn *c) {
    if (w->heap_len == w->heap_cap) { w->heap_cap = w->heap_cap ? 2 * w->heap_cap : 256; w->heap = realloc(w->heap, w->heap_cap * sizeof *w->heap); }
    w->heap[w->heap_len] = c; c->heap_at = w->heap_len++;
    heap_up(w, c->heap_at);
}

static void heap_remove(worker *w, conn *c) {
    int i = c->heap_at;
    if (i < 0) return;
    heap_swap(w, i, --w->heap_len);
    c->heap_at = -1;
    if (i < w->heap_len) { heap_down(w, i); heap_up(w, i); }
}

static void arm(worker *w) {
    struct itimerspec spec = {0};
    if (w->heap_len) {
        int64_t due = w->heap[0]->due;
        spec.it_value.tv_sec = due / 1000000000;
        spec.it_value.tv_nsec = due % 1000000000;
    }
    timerfd_settime(w->timer, TFD_TIMER_ABSTIME, &spec, NULL);
}

/* ---- HTTP ---- */

static void close_conn(worker *w, conn *c) {
    heap_remove(w, c);
    epoll_ctl(w->epoll, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    free(c->in); free(c->out); free(c->written); free(c);
}

static void respond_json(worker *w, conn *c, int status, const char *body) {
    char head[256];
    int n = snprintf(head, sizeof head, "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n\r\n",
                     status, status == 200 ? "OK" : "Not Found", strlen(body));
    send_raw(w, c, head, (size_t)n);
    send_raw(w, c, body, strlen(body));
}

static int json_int(const char *body, const char *key, int fallback) {
    const char *at = strstr(body, key);
    if (!at) return fallback;
    at = strchr(at + strlen(key), ':');
    return at ? atoi(at + 1) : fallback;
}

static int json_true(const char *body, const char *key) {
    const char *at = strstr(body, key);
    if (!at || !(at = strchr(at + strlen(key), ':'))) return 0;
    while (*++at == ' ') {}
    return strncmp(at, "true", 4) == 0;
}

static void begin_stream(worker *w, conn *c, const char *path, const char *body) {
    c->received = now_ns();
    c->chat = strstr(path, "chat/completions") != NULL;
    c->tokens = json_int(body, "\"max_tokens\"", json_int(body, "\"max_completion_tokens\"", default_tokens));
    if (c->tokens < 1) c->tokens = 1;
    c->running_usage = json_true(body, "\"continuous_usage_stats\"");
    c->include_usage = json_true(body, "\"include_usage\"");
    c->sent = 0; c->active = 1;
    c->written = realloc(c->written, sizeof(int64_t) * c->tokens);
    static const char head[] = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
                               "Transfer-Encoding: chunked\r\n\r\n";
    send_raw(w, c, head, sizeof head - 1);
    c->due = c->received + ttft_ns;
    heap_push(w, c);
    arm(w);
}

static void end_stream(worker *w, conn *c) {
    char payload[512];
    if (c->include_usage) {
        snprintf(payload, sizeof payload, "{\"id\":\"cmpl-mock\",\"object\":\"%s\",\"created\":0,\"model\":\"mock\","
                 "\"choices\":[],\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":%d,\"total_tokens\":%d}}",
                 c->chat ? "chat.completion.chunk" : "text_completion", prompt_tokens, c->tokens, prompt_tokens + c->tokens);
        sse(w, c, payload);
    }
    sse(w, c, "[DONE]");
    send_raw(w, c, "0\r\n\r\n", 5);
    c->active = 0;
    pthread_mutex_lock(&stamps_lock);
    if (stamps) {
        fprintf(stamps, "%lld", (long long)c->received);
        for (int i = 0; i < c->sent; i++) fprintf(stamps, " %lld", (long long)c->written[i]);
        fputc('\n', stamps);
    }
    pthread_mutex_unlock(&stamps_lock);
}

static void next_chunk(worker *w, conn *c) {
    char payload[768], usage[160] = "";
    int last = c->sent + 1 == c->tokens;
    if (c->running_usage)
        snprintf(usage, sizeof usage, ",\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":%d,\"total_tokens\":%d}",
                 prompt_tokens, c->sent + 1, prompt_tokens + c->sent + 1);
    const char *finish = last ? "\"length\"" : "null";
    if (c->chat)
        snprintf(payload, sizeof payload, "{\"id\":\"chatcmpl-mock\",\"object\":\"chat.completion.chunk\",\"created\":0,"
                 "\"model\":\"mock\",\"choices\":[{\"index\":0,\"delta\":{%s\"content\":\"%s\"},\"finish_reason\":%s}]%s}",
                 c->sent ? "" : "\"role\":\"assistant\",", text, finish, usage);
    else
        snprintf(payload, sizeof payload, "{\"id\":\"cmpl-mock\",\"object\":\"text_completion\",\"created\":0,"
                 "\"model\":\"mock\",\"choices\":[{\"index\":0,\"text\":\"%s\",\"logprobs\":null,\"finish_reason\":%s}]%s}",
                 text, finish, usage);
    c->written[c->sent++] = now_ns();
    sse(w, c, payload);
    if (last) end_stream(w, c);
    else { c->due = c->received + ttft_ns + c->sent * itl_ns; heap_push(w, c); }
}

/* Parse every complete request in the input buffer. Returns -1 to close. */
static int handle_input(worker *w, conn *c) {
    while (!c->active) {
        c->in[c->in_len] = 0;
        char *end = strstr(c->in, "\r\n\r\n");
        if (!end) return 0;
        size_t head_len = end + 4 - c->in;
        long length = 0;
        for (char *line = strstr(c->in, "\r\n"); line && line < end; line = strstr(line + 2, "\r\n")) {
            if (!strncasecmp(line + 2, "content-length:", 15)) length = atol(line + 17);
            if (!strncasecmp(line + 2, "connection:", 11)) {
                char *close_at = strcasestr(line + 13, "close");
                c->close_after = close_at && close_at < strstr(line + 2, "\r\n");
            }
        }
        if (c->in_len < head_len + length) return 0;
        char method[8] = "", path[512] = "";
        sscanf(c->in, "%7s %511s", method, path);
        char saved = c->in[head_len + length];
        c->in[head_len + length] = 0;
        const char *body = c->in + head_len;
        if (!strcmp(method, "POST") && (strstr(path, "/completions"))) begin_stream(w, c, path, body);
        else if (!strcmp(method, "GET") && strstr(path, "/models"))
            respond_json(w, c, 200, "{\"object\":\"list\",\"data\":[{\"id\":\"mock\",\"object\":\"model\",\"owned_by\":\"benchd\"}]}");
        else if (!strcmp(method, "GET") && strstr(path, "/_flush")) {
            pthread_mutex_lock(&stamps_lock);
            if (stamps) fflush(stamps);
            pthread_mutex_unlock(&stamps_lock);
            respond_json(w, c, 200, "{}");
        } else if (!strcmp(method, "GET") && (strstr(path, "/health") || strstr(path, "/ping")))
            respond_json(w, c, 200, "{}");
        else respond_json(w, c, 404, "{\"error\":{\"message\":\"not found\"}}");
        c->in[head_len + length] = saved;
        memmove(c->in, c->in + head_len + length, c->in_len - head_len - length);
        c->in_len -= head_len + length;
        if (c->close_after && !c->active) return -1;
    }
    return 0;
}

static void on_readable(worker *w, conn *c) {
    for (;;) {
        if (c->in_cap - c->in_len < 4097) { c->in_cap = c->in_cap * 2 + 8192; c->in = realloc(c->in, c->in_cap); }
        ssize_t n = read(c->fd, c->in + c->in_len, c->in_cap - c->in_len - 1);
        if (n == 0 || (n < 0 && errno != EAGAIN)) { close_conn(w, c); return; }
        if (n < 0) break;
        c->in_len += n;
    }
    if (handle_input(w, c) < 0) close_conn(w, c);
}

static void on_timer(worker *w) {
    uint64_t expirations;
    if (read(w->timer, &expirations, sizeof expirations) < 0) {}
    int64_t now = now_ns();
    while (w->heap_len && w->heap[0]->due <= now) {
        conn *c = w->heap[0];
        heap_remove(w, c);
        next_chunk(w, c);
        if (!c->active && c->close_after) close_conn(w, c);
        else if (!c->active) handle_input(w, c);  /* a request that came in behind this one */
    }
    arm(w);
}

static int listen_on(int *chosen) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0), one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons(*chosen), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (bind(fd, (struct sockaddr *)&addr, sizeof addr) || listen(fd, 4096)) { perror("bind/listen"); exit(1); }
    socklen_t len = sizeof addr;
    getsockname(fd, (struct sockaddr *)&addr, &len);
    *chosen = ntohs(addr.sin_port);
    return fd;
}

static void *serve(void *arg) {
    worker *w = arg;
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL}, events[256];
    epoll_ctl(w->epoll, EPOLL_CTL_ADD, w->listener, &ev);
    ev.data.ptr = w;
    epoll_ctl(w->epoll, EPOLL_CTL_ADD, w->timer, &ev);
    for (;;) {
        int n = epoll_wait(w->epoll, events, 256, -1);
        for (int i = 0; i < n; i++) {
            void *p = events[i].data.ptr;
            if (p == NULL) {
                int fd;
                while ((fd = accept4(w->listener, NULL, NULL, SOCK_NONBLOCK)) >= 0) {
                    int one = 1;
                    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                    conn *c = calloc(1, sizeof *c);
                    c->fd = fd; c->heap_at = -1;
                    struct epoll_event cev = {.events = EPOLLIN, .data.ptr = c};
                    epoll_ctl(w->epoll, EPOLL_CTL_ADD, fd, &cev);
                }
            } else if (p == w) {
                on_timer(w);
            } else {
                conn *c = p;
                if (events[i].events & EPOLLOUT) {
                    if (flush_out(w, c) < 0) { close_conn(w, c); continue; }
                    if (!c->out_len) { struct epoll_event cev = {.events = EPOLLIN, .data.ptr = c}; epoll_ctl(w->epoll, EPOLL_CTL_MOD, c->fd, &cev); }
                }
                if (events[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) on_readable(w, c);
            }
        }
    }
    return NULL;
}

static void on_term(int sig) {
    (void)sig;
    if (stamps) fflush(stamps);  /* not async-signal-safe in general; here the process ends right after */
    _exit(0);
}

int main(int argc, char **argv) {
    int threads = 1;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--port")) port = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--ttft-ms")) ttft_ns = (int64_t)(atof(argv[i + 1]) * 1e6);
        else if (!strcmp(argv[i], "--itl-ms")) itl_ns = (int64_t)(atof(argv[i + 1]) * 1e6);
        else if (!strcmp(argv[i], "--threads")) threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--tokens")) default_tokens = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--text")) text = argv[i + 1];
        else if (!strcmp(argv[i], "--prompt-tokens")) prompt_tokens = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--stamps")) {
            stamps = fopen(argv[i + 1], "w");
            if (!stamps) { perror(argv[i + 1]); return 1; }
            setvbuf(stamps, NULL, _IOFBF, 1 << 22);
        } else { fprintf(stderr, "unknown option %s\n", argv[i]); return 2; }
    }
    signal(SIGPIPE, SIG_IGN);
    signal(SIGTERM, on_term);
    signal(SIGINT, on_term);
    pthread_t ids[256];
    if (threads < 1 || threads > 256) threads = 1;
    for (int i = 0; i < threads; i++) {
        worker *w = calloc(1, sizeof *w);
        w->listener = listen_on(&port);
        w->epoll = epoll_create1(0);
        w->timer = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK);
        pthread_create(&ids[i], NULL, serve, w);
    }
    printf("listening %d\n", port);
    fflush(stdout);
    for (int i = 0; i < threads; i++) pthread_join(ids[i], NULL);
    return 0;
}
