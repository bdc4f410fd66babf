/*
 * Layer 5: actors (seed 000's ActorScheduler, as a runtime).
 *
 * An actor is a detached task with a mailbox and, usually, a name. Its
 * record holds:
 *
 *  - the mailbox: a ring of message pointers that grows by doubling (and
 *    shrinks back once mostly empty), so queueing a message allocates
 *    nothing in the steady state and the memory is the high-water mark of
 *    the queue, not the number of messages ever sent;
 *  - for a bounded mailbox, the senders waiting for room: records on their
 *    own stacks, in a FIFO. A receive that frees a slot moves the first
 *    waiting sender's message into the ring and wakes that sender with 0,
 *    so the order is kept and no newcomer can take the slot first;
 *  - the tasks waiting for its end (weft_actor_wait), the same records in
 *    a second list, all woken with 0 when it ends;
 *  - the link of its bucket in the loop's registry: a hash table of
 *    chained records keyed by name (loop->actors).
 *
 * The task's on_exit hook ends the actor: it leaves the registry (the name
 * is free again), waiting senders are refused with -ENOENT, the messages
 * left in the mailbox go to the release callback, and then the tasks
 * waiting for the end are woken (until then a wait for the actor parks,
 * even though sends to it fail already). The record is then recycled.
 * Handles carry the record's generation in their top bits,
 * as task handles do (task.c), so a handle of an actor that has ended is
 * recognised (sends to it return -ENOENT) even once its record serves
 * another actor. Records are never given back to the allocator before the
 * loop is freed, so a stale handle always points at readable memory.
 *
 * An ask (weft_actor_ask) is a send whose mailbox slot also holds a reply
 * future, made with two references: the asker's, returned, and the slot's.
 * weft_actor_recv moves the slot's into a->current, the reply of the
 * message the actor received last; weft_actor_reply completes and drops
 * it, weft_actor_take_reply hands it over. A reply still current when the
 * actor calls recv again or ends, and those of the messages left in the
 * mailbox, are cancelled and dropped: no asker waits for an answer that
 * cannot come. Plain sends leave the slot's reply NULL.
 *
 * The actor behind the running task is found through the hook itself:
 * a task whose on_exit is actor_exit is an actor, and on_exit_arg is its
 * record. No field of the task record is needed for it.
 */
#include "internal.h"

#include <errno.h>
#include <string.h>

enum { ACTOR_FREE, ACTOR_LIVE, ACTOR_ENDED };

/* A send waiting for room in a bounded mailbox (on the sender's stack). */
typedef struct sender {
  weft__queued q; /* first: the queue's records are senders */
  void *msg;
  weft_future *reply; /* an ask's (the slot's reference), else NULL */
} sender;

/*
 * The mailbox ring: `cap` slots (a power of two, or 0 before the first
 * message), `len` messages from `head` on, wrapping. Each message has the
 * number of its send among all the loop's (the seed's single FIFO, which
 * weft_actor_recv follows):
 *
 *     ring: [ m3 | m4 |    |    |    | m0 | m1 | m2 ]
 *                       ^              ^
 *                       head+len       head          (all mod cap)
 */
typedef struct mail {
  void *msg;
  uint64_t seq;       /* the loop's count of sends when it was queued */
  weft_future *reply; /* an ask's, with a reference; NULL: a plain send */
} mail;

struct weft_actor {
  weft_loop *loop;       /* the loop it belongs to */
  char *name;            /* owned copy; NULL: anonymous (not registered) */
  uint64_t hash;         /* of name */
  weft_actor *hnext;     /* next in its registry bucket, or the free list */
  weft_actor *all;       /* next of every record the loop has (to free) */
  weft_task *task;       /* the task's handle while it runs, else NULL */
  weft_task *rec;        /* ... and its record */
  mail *ring;            /* the mailbox (see above) */
  size_t head, len, cap; /* its first message, how many, slots */
  size_t bound;          /* most messages queued (0: no bound) */
  void *senders;         /* waiting for room (sender), first come first */
  void *senders_tail;    /* ... to last */
  void *enders;          /* waiting for the end (weft__queued) ... */
  void *enders_tail;     /* ... and the last of them */
  void (*release)(void *msg, void *arg); /* for messages left at the end */
  void *release_arg;
  weft_future *current; /* reply of the message received last (see top) */
  void (*reply_release)(void *value, void *arg); /* for replies not taken */
  void *reply_release_arg;
  uint16_t gen;      /* handle generation: bumped on each recycle */
  uint8_t state;     /* ACTOR_* */
  uint8_t receiving; /* its task is parked in weft_actor_recv */
  uint8_t in_recv;   /* its task is inside weft_actor_recv (older_first) */
};

/* The registry of a loop (loop->actors). */
typedef struct registry {
  weft_actor **buckets; /* nbuckets chains of named actors */
  size_t nbuckets;      /* a power of two */
  size_t count;         /* named actors registered */
  weft_actor *free;     /* recycled records */
  weft_actor *all;      /* every record, live or free */
  uint64_t sends;       /* messages queued so far, in all mailboxes */
} registry;

#define BUCKETS_MIN 16
#define RING_MIN    8
/* A ring this large or larger is halved once it is three-quarters empty. */
#define RING_SHRINK 64

/* ---- handles ----------------------------------------------------------
 * As in task.c: the generation in the top 16 bits of the pointer. Where
 * pointers have no spare bits, records are not recycled at all, which is
 * as safe and costs one record per actor ever spawned. */
#if UINTPTR_MAX > 0xffffffffu
#define GEN_SHIFT 48
#define ADDR_MASK ((((uintptr_t)1) << GEN_SHIFT) - 1)
#define RECYCLE   1
static weft_actor *handle_of(weft_actor *a) {
  return (weft_actor *)((uintptr_t)a | ((uintptr_t)a->gen << GEN_SHIFT));
}
/* The record a handle points at, stale or not. */
static weft_actor *address_of(const weft_actor *h) {
  return (weft_actor *)((uintptr_t)h & ADDR_MASK);
}
/* The record of a handle whose actor has not finished ending (live, or in
 * its on_exit hook, releasing its mailbox), else NULL. */
static weft_actor *record_unfinished(const weft_actor *h) {
  weft_actor *a = address_of(h);
  if (!a || a->state == ACTOR_FREE ||
      a->gen != (uint16_t)((uintptr_t)h >> GEN_SHIFT))
    return NULL;
  return a;
}
static weft_actor *record_of(const weft_actor *h) {
  weft_actor *a = record_unfinished(h);
  return a && a->state == ACTOR_LIVE ? a : NULL;
}
#else
#define RECYCLE 0
static weft_actor *handle_of(weft_actor *a) { return a; }
static weft_actor *address_of(const weft_actor *h) { return (weft_actor *)h; }
static weft_actor *record_unfinished(const weft_actor *h) {
  return h && h->state != ACTOR_FREE ? (weft_actor *)h : NULL;
}
static weft_actor *record_of(const weft_actor *h) {
  return h && h->state == ACTOR_LIVE ? (weft_actor *)h : NULL;
}
#endif

static void actor_exit(weft_task *t, void *arg);

/* The actor the running task is, or NULL. */
static weft_actor *running_actor(weft_task **tp) {
  weft_task *t = weft__running_task();
  if (tp)
    *tp = t;
  return t && t->on_exit == actor_exit ? t->on_exit_arg : NULL;
}

/* The loop a call by name means: the running one, else the current. */
static weft_loop *this_loop(void) {
  return weft__loop_running ? weft__loop_running : weft_loop_current();
}

/* ---- the registry ----------------------------------------------------- */
/* FNV-1a, 64 bits: names are short, and this spreads them well enough for
 * a table that is never larger than the number of names. */
static uint64_t name_hash(const char *s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (; *s; s++)
    h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
  return h;
}

static weft_actor *registry_find(const registry *r, const char *name,
                                 uint64_t hash) {
  if (!r || !r->nbuckets)
    return NULL;
  weft_actor *a = r->buckets[hash & (r->nbuckets - 1)];
  for (; a; a = a->hnext)
    if (a->hash == hash && strcmp(a->name, name) == 0)
      return a;
  return NULL;
}

/* Makes room for one more name (the chains average at most one record),
 * so that registering, done after the task is spawned, cannot fail. */
static int registry_reserve(registry *r) {
  if (r->count < r->nbuckets)
    return 0;
  size_t n = r->nbuckets ? r->nbuckets * 2 : BUCKETS_MIN;
  weft_actor **b = weft__calloc(n, sizeof *b);
  if (!b)
    return -ENOMEM;
  for (size_t i = 0; i < r->nbuckets; i++)
    while (r->buckets[i]) {
      weft_actor *a = r->buckets[i];
      r->buckets[i] = a->hnext;
      a->hnext = b[a->hash & (n - 1)];
      b[a->hash & (n - 1)] = a;
    }
  weft__free(r->buckets);
  r->buckets = b;
  r->nbuckets = n;
  return 0;
}

static void registry_insert(registry *r, weft_actor *a) {
  weft_actor **b = &r->buckets[a->hash & (r->nbuckets - 1)];
  a->hnext = *b;
  *b = a;
  r->count++;
}

static void registry_remove(registry *r, weft_actor *a) {
  weft_actor **p = &r->buckets[a->hash & (r->nbuckets - 1)];
  while (*p != a)
    p = &(*p)->hnext;
  *p = a->hnext;
  a->hnext = NULL;
  r->count--;
}

static void actors_free(weft_loop *loop);

static registry *registry_of(weft_loop *loop) {
  if (!loop->actors && (loop->actors = weft__calloc(1, sizeof(registry))))
    loop->actors_free = actors_free;
  return loop->actors;
}

/* ---- records ---------------------------------------------------------- */
static weft_actor *record_new(registry *r, weft_loop *loop) {
  weft_actor *a = r->free;
  if (a) {
    r->free = a->hnext;
    return a;
  }
  if (!(a = weft__calloc(1, sizeof *a)))
    return NULL;
  a->loop = loop; /* for good: a stale handle still names it */
  a->all = r->all;
  r->all = a;
  return a;
}

static void record_free(registry *r, weft_actor *a) {
  weft__free(a->name);
  a->name = NULL;
  weft__free(a->ring);
  a->ring = NULL;
  a->head = a->len = a->cap = 0;
  a->state = ACTOR_FREE;
  /* A generation that wrapped would make a handle of 65,536 actors ago
   * valid again: such a record is retired instead (kept, unused). */
  if (!RECYCLE || ++a->gen == 0)
    return;
  a->hnext = r->free;
  r->free = a;
}

/* ---- the mailbox ring ------------------------------------------------- */
/* Moves the messages into a ring of `cap` slots (cap >= len, a power of
 * two), in order from slot 0. */
static int ring_resize(weft_actor *a, size_t cap) {
  mail *ring = weft__malloc(cap * sizeof *ring);
  if (!ring)
    return -ENOMEM;
  for (size_t i = 0; i < a->len; i++)
    ring[i] = a->ring[(a->head + i) & (a->cap - 1)];
  weft__free(a->ring);
  a->ring = ring;
  a->head = 0;
  a->cap = cap;
  return 0;
}

/* The mail a message becomes, numbered. */
static mail stamp(const weft_actor *a, void *msg, weft_future *reply) {
  registry *r = a->loop->actors;
  return (mail){msg, ++r->sends, reply};
}

static int ring_push(weft_actor *a, void *msg, weft_future *reply) {
  if (a->len == a->cap) {
    if (a->cap > SIZE_MAX / 2 / sizeof(mail))
      return -ENOMEM;
    int rc = ring_resize(a, a->cap ? a->cap * 2 : RING_MIN);
    if (rc < 0)
      return rc;
  }
  a->ring[(a->head + a->len) & (a->cap - 1)] = stamp(a, msg, reply);
  a->len++;
  return 0;
}

static mail ring_take(weft_actor *a) {
  mail m = a->ring[a->head];
  a->head = (a->head + 1) & (a->cap - 1);
  a->len--;
  return m;
}

/* A ring that once held a burst gives most of it back when the burst is
 * over; halving only at a quarter full keeps a queue that hovers around
 * one size from resizing back and forth. A failed shrink changes nothing. */
static void ring_maybe_shrink(weft_actor *a) {
  if (a->cap >= RING_SHRINK && a->len < a->cap / 4)
    (void)ring_resize(a, a->cap / 2);
}

/* Queues msg (with an ask's reply) and wakes the actor if it waits for
 * one. */
static int deliver(weft_actor *a, void *msg, weft_future *reply) {
  int rc = ring_push(a, msg, reply);
  if (rc < 0)
    return rc;
  if (a->receiving) {
    a->receiving = 0;
    weft__wake(a->rec, 0);
  }
  return 0;
}

/* ---- replies ---------------------------------------------------------- */
/* Tells an asker that its message will not be answered: the reply is
 * cancelled (its weft_await returns -ECANCELED; one the asker completed or
 * cancelled itself stays as it is) and the mailbox's reference dropped. No
 * user code runs here: a cancelled reply holds no value to release. */
static void unanswered(weft_future *f) {
  if (f) {
    (void)weft_future_cancel(f);
    weft_future_release(f);
  }
}

/* Out of line, and marked unlikely in weft_actor_recv: there, with no
 * reply to drop, it costs a test and a branch (inlined, the call made GCC
 * reload the running task on every receive). */
static __attribute__((noinline)) void drop_current(weft_actor *a) {
  weft_future *f = a->current;
  a->current = NULL;
  unanswered(f);
}

/* The leftover mail m at the end: the message to the release callback
 * first, then the reply, so that an asker returns only once its message
 * has been released (one that points into its stack stays valid until
 * then, even if the callback blocks). */
static void release_mail(weft_actor *a, mail m) {
  if (a->release)
    a->release(m.msg, a->release_arg);
  unanswered(m.reply);
}

/* ---- spawning and ending ---------------------------------------------- */
weft_actor *weft_actor_spawn_opts(const char *name, void *(*fn)(void *),
                                  void *arg, const weft_actor_opts *opts) {
  weft_loop *loop = this_loop();
  if (!loop || !fn) {
    errno = EINVAL;
    return NULL;
  }
  registry *r = registry_of(loop);
  if (!r)
    return NULL; /* ENOMEM */
  uint64_t hash = name ? name_hash(name) : 0;
  if (name && registry_find(r, name, hash)) {
    errno = EEXIST;
    return NULL;
  }
  if (name && registry_reserve(r) < 0) {
    errno = ENOMEM;
    return NULL;
  }
  weft_actor *a = record_new(r, loop);
  if (!a)
    return NULL; /* ENOMEM */
  if (name && !(a->name = weft__strdup(name)))
    goto fail;
  weft_task_opts topts = {
      .name = name, .stack_size = opts ? opts->stack_size : 0, .loop = loop};
  weft_task *h = weft_spawn_opts(fn, arg, &topts);
  if (!h)
    goto fail;
  /* From here nothing fails: the task runs, and finds its actor ready. */
  weft_detach(h);
  a->hash = hash;
  a->task = h;
  a->rec = weft__task_record(h);
  a->rec->on_exit = actor_exit;
  a->rec->on_exit_arg = a;
  a->bound = opts ? opts->mailbox_bound : 0;
  a->release = opts ? opts->release : NULL;
  a->release_arg = opts ? opts->release_arg : NULL;
  a->current = NULL;
  a->reply_release = opts ? opts->reply_release : NULL;
  a->reply_release_arg = opts ? opts->reply_release_arg : NULL;
  a->senders = a->senders_tail = NULL;
  a->enders = a->enders_tail = NULL;
  a->receiving = 0;
  a->state = ACTOR_LIVE;
  if (name)
    registry_insert(r, a);
  return handle_of(a);
fail:
  record_free(r, a);
  errno = ENOMEM;
  return NULL;
}

weft_actor *weft_actor_spawn(const char *name, void *(*fn)(void *), void *arg) {
  return weft_actor_spawn_opts(name, fn, arg, NULL);
}

/* The task's on_exit hook, in the task, right after fn returned. */
static void actor_exit(weft_task *t, void *arg) {
  weft_actor *a = arg;
  registry *r = a->loop->actors;
  /* Ended from here on: weft_actor_self is NULL, sends get -ENOENT (also
   * those the release callback below might make), the name is free. */
  t->on_exit = NULL;
  a->state = ACTOR_ENDED;
  a->task = NULL;
  if (a->name)
    registry_remove(r, a);
  /* The message it received last will not be answered now. */
  drop_current(a);
  /* The waiting senders' messages were never queued: they stay theirs
   * (and an asker's reply is its own to drop). */
  while (weft__wake_first(&a->senders, -ENOENT))
    ;
  /* The rest goes to the release callback, oldest first. It is user code:
   * the ring is re-read after each call. It may also block, and tasks that
   * wait for the end meanwhile join the waiters (a->rec, still set, tells
   * weft_actor_wait the callback itself apart). Should the loop be freed
   * meanwhile, the reply of the message in hand is freed with the loop's
   * futures, pending: its asker is gone, and it holds no value. */
  while (a->len)
    release_mail(a, ring_take(a));
  a->rec = NULL;
  /* Ended and released: now the waiters. */
  while (weft__wake_first(&a->enders, 0))
    ;
  record_free(r, a);
}

/* Frees the registry and the records, releasing the messages still queued
 * in mailboxes (the loop's actors_free hook). */
static void actors_free(weft_loop *loop) {
  registry *r = loop->actors;
  if (!r)
    return;
  loop->actors = NULL;
  /* The tasks are gone (their stacks dropped, with any waiting senders on
   * them): only what the records own is left, and the messages queued in
   * the mailboxes of actors that never finished ending (live, or dropped
   * inside a release callback that blocked), which are released, and the
   * replies they still hold, which are cancelled and dropped. The loop's
   * futures are freed after this (weft_loop_free), so all of it is still
   * there. */
  while (r->all) {
    weft_actor *a = r->all;
    r->all = a->all;
    drop_current(a);
    while (a->len)
      release_mail(a, ring_take(a));
    weft__free(a->name);
    weft__free(a->ring);
    weft__free(a);
  }
  weft__free(r->buckets);
  weft__free(r);
}

/* ---- sending ---------------------------------------------------------- */
static int send_bounded(weft_actor *a, void *msg, weft_future *reply) {
  weft_task *t = weft__running_task();
  if (t) {
    int rc = weft__checkpoint(); /* a blocking call: it checks first */
    if (rc < 0)
      return rc;
  }
  if (a->len < a->bound && !a->senders)
    return deliver(a, msg, reply);
  if (!t)
    return -EINVAL; /* it would have to wait, outside a task */
  if (t == a->rec)
    return -EDEADLK; /* only the actor itself could make room */
  sender s = {.msg = msg, .reply = reply};
  /* 0: a receive moved msg into the mailbox. -ENOENT: the actor ended.
   * -ECANCELED, -ETIMEDOUT: the undo took s off; msg was not queued.
   * Either way s is off the list, and `a` must not be touched again. */
  return weft__park_queued(&s.q, t, &a->senders, &a->senders_tail,
                           WAIT_MAILBOX_FULL, a);
}

/* Whether a (NULL: no such actor) may be sent to from here: 0, -ENOENT,
 * or -EINVAL (another thread, or another loop's code). */
static inline __attribute__((always_inline)) int
reachable(const weft_actor *a) {
  if (!a)
    return -ENOENT;
  return weft__callers(a->loop, a->loop->thread) ? 0 : -EINVAL;
}

/* Queues msg, with an ask's reply (or NULL), for a reachable actor.
 * `try`: weft_actor_try_send's, which never waits: a full bounded mailbox
 * (or one with senders already waiting for room, who come first) is
 * -EAGAIN, and no cancellation point. */
static int post(weft_actor *a, void *msg, int try, weft_future *reply) {
  if (!a->bound)
    return deliver(a, msg, reply);
  if (try)
    return a->len >= a->bound || a->senders ? -EAGAIN : deliver(a, msg, reply);
  return send_bounded(a, msg, reply);
}

/* The actor a handle or a name stands for, as the calls find it: 0 and *a
 * (NULL: no such actor, or it has ended), or -EINVAL. For a handle the
 * thread is checked first, from the record's loop, which never changes:
 * the generation and state are the loop thread's to read. */
static inline __attribute__((always_inline)) int by_handle(weft_actor *h,
                                                           weft_actor **a) {
  if (!h)
    return -EINVAL;
  const weft_loop *loop = address_of(h)->loop;
  if (!weft__callers(loop, loop->thread))
    return -EINVAL;
  *a = record_of(h);
  return 0;
}

static inline __attribute__((always_inline)) int by_name(const char *name,
                                                         weft_actor **a) {
  weft_loop *loop = this_loop();
  if (!name || !loop)
    return -EINVAL;
  *a = registry_find(loop->actors, name, name_hash(name));
  return 0;
}

static int send_to(weft_actor *a, void *msg, int try) {
  int rc = reachable(a);
  return rc < 0 ? rc : post(a, msg, try, NULL);
}

static int send_by_handle(weft_actor *h, void *msg, int try) {
  weft_actor *a;
  int rc = by_handle(h, &a);
  return rc < 0 ? rc : send_to(a, msg, try);
}

static int send_by_name(const char *name, void *msg, int try) {
  weft_actor *a;
  int rc = by_name(name, &a);
  return rc < 0 ? rc : send_to(a, msg, try);
}

int weft_actor_send_to(weft_actor *h, void *msg) {
  return send_by_handle(h, msg, 0);
}

int weft_actor_send(const char *name, void *msg) {
  return send_by_name(name, msg, 0);
}

int weft_actor_try_send_to(weft_actor *h, void *msg) {
  return send_by_handle(h, msg, 1);
}

int weft_actor_try_send(const char *name, void *msg) {
  return send_by_name(name, msg, 1);
}

/* ---- asking and replying ---------------------------------------------- */
/* A send with a reply: the reply, or NULL and errno. `rc` is what finding
 * the actor `a` gave (by_handle, by_name); its checks and send_to's are
 * made before the reply is: a refused ask allocates nothing. */
static weft_future *ask(int rc, weft_actor *a, void *msg) {
  if (rc == 0)
    rc = reachable(a);
  if (rc < 0) {
    errno = -rc;
    return NULL;
  }
  /* The asker's reference, and the mailbox slot's, taken before the send:
   * an actor may answer and drop its own before the asker is back from a
   * wait for room. */
  weft_future *f = weft__future_new_in(a->loop);
  if (!f) {
    errno = ENOMEM;
    return NULL;
  }
  weft_future_ref(f);
  if (a->reply_release)
    weft__future_releases(f, a->reply_release, a->reply_release_arg);
  rc = post(a, msg, 0, f);
  if (rc < 0) { /* not queued: neither reference was handed out */
    weft_future_release(f);
    weft_future_release(f);
    errno = -rc;
    return NULL;
  }
  return f;
}

weft_future *weft_actor_ask_to(weft_actor *h, void *msg) {
  weft_actor *a = NULL;
  int rc = by_handle(h, &a);
  return ask(rc, a, msg);
}

weft_future *weft_actor_ask(const char *name, void *msg) {
  weft_actor *a = NULL;
  int rc = by_name(name, &a);
  return ask(rc, a, msg);
}

int weft_actor_reply(void *value) {
  weft_actor *a = running_actor(NULL);
  if (!a)
    return -EINVAL;
  weft_future *f = a->current;
  if (!f)
    return -ENOENT;
  a->current = NULL;
  /* An asker that cancelled the reply itself takes no value: it goes to
   * reply_release, as one the asker let go of unread does. */
  if (weft_future_set_result(f, value) < 0 && a->reply_release)
    a->reply_release(value, a->reply_release_arg);
  weft_future_release(f);
  return 0;
}

weft_future *weft_actor_take_reply(void) {
  weft_actor *a = running_actor(NULL);
  if (!a) {
    errno = EINVAL;
    return NULL;
  }
  weft_future *f = a->current;
  if (!f) {
    errno = ENOENT;
    return NULL;
  }
  a->current = NULL;
  return f;
}

/* ---- receiving -------------------------------------------------------- */
static void undo_recv(weft_task *t, void *arg) {
  weft_actor *a = arg;
  (void)t;
  a->receiving = 0;
}

/* Takes the oldest message; a slot freed in a bounded mailbox goes to the
 * first waiting sender, whose message joins the queue at once. */
static mail take(weft_actor *a) {
  mail m = ring_take(a);
  const sender *s = a->senders;
  if (s) {
    /* The slot just freed: cannot fail. */
    a->ring[(a->head + a->len) & (a->cap - 1)] = stamp(a, s->msg, s->reply);
    a->len++;
    weft__wake_first(&a->senders, 0);
  } else {
    ring_maybe_shrink(a);
  }
  return m;
}

/* The fairness rule, for an actor with a message waiting and the task
 * `next` first in line to run: it yields to it, unless `next` is an actor
 * whose own oldest message was sent after this one's. Actors so handle
 * messages in the order they were sent, as the seed's single FIFO of
 * (actor, message) pairs does, and an actor whose mailbox is never empty
 * (one that sends to itself) cannot keep the CPU, nor let the mailboxes
 * of the actors it feeds grow without end. */
static int yields_to(const weft_actor *a, const weft_task *next) {
  const weft_actor *b = next->on_exit == actor_exit ? next->on_exit_arg : NULL;
  return !b || !b->len || b->ring[b->head].seq < a->ring[a->head].seq;
}

/* Whether `next` is an actor inside weft_actor_recv (so it takes its
 * message when it runs) whose oldest message was sent before a's. One
 * that runs its own code instead (yielding in a loop until a's work is
 * done, say) would have a wait for it for good. */
static int older_first(const weft_actor *a, const weft_task *next) {
  const weft_actor *b = next->on_exit == actor_exit ? next->on_exit_arg : NULL;
  return b && b->in_recv && b->len &&
         b->ring[b->head].seq < a->ring[a->head].seq;
}

static int recv_in(weft_actor *a, weft_loop *loop, void **msg);

int weft_actor_recv(void **msg) {
  weft_task *t;
  weft_actor *a = running_actor(&t);
  if (!a || !msg)
    return -EINVAL;
  /* Asking for the next message ends the last one's turn: unanswered, its
   * asker is told so now, not when the next message comes. */
  if (__builtin_expect(a->current != NULL, 0))
    drop_current(a);
  int rc = weft__checkpoint();
  if (rc < 0)
    return rc;
  a->in_recv = 1;
  rc = recv_in(a, t->loop, msg);
  a->in_recv = 0;
  return rc;
}

static int recv_in(weft_actor *a, weft_loop *loop, void **msg) {
  int rc;
  if (a->len) {
    /* A message taken without yielding counts as one of the turn's
     * hand-offs: with the turn's share used up, the actor yields even
     * when it is alone or the rule above lets it go on, and the loop gets
     * to its timers, callbacks and I/O (a backlog of a million messages
     * held them off until it was drained). */
    if (!loop->batch || (loop->ready_head && yields_to(a, loop->ready_head))) {
      /* Back from the yield, an actor with an older message first in
       * line still goes first (the yield may have been the turn's end, or
       * for a task ahead of it), so that a backlog cut by turns keeps the
       * order; each time, that actor (inside weft_actor_recv: older_first)
       * takes its message, so this ends. */
      do {
        if ((rc = weft_yield()) < 0)
          return rc;
      } while (loop->ready_head && older_first(a, loop->ready_head));
    } else {
      loop->batch--;
    }
  }
  while (!a->len) {
    a->receiving = 1;
    rc = weft__park(WAIT_MAILBOX, (int64_t)(uintptr_t)a, undo_recv, a);
    a->receiving = 0;
    if (rc < 0)
      return rc;
  }
  mail m = take(a);
  *msg = m.msg;
  a->current = m.reply;
  return 0;
}

/* ---- looking up ------------------------------------------------------- */
weft_actor *weft_actor_lookup(const char *name) {
  weft_loop *loop = this_loop();
  if (!name || !loop)
    return NULL;
  weft_actor *a = registry_find(loop->actors, name, name_hash(name));
  return a ? handle_of(a) : NULL;
}

weft_actor *weft_actor_self(void) {
  weft_actor *a = running_actor(NULL);
  return a ? handle_of(a) : NULL;
}

weft_task *weft_actor_task(weft_actor *h) {
  weft_actor *a = h ? record_of(h) : NULL;
  return a ? a->task : NULL;
}

size_t weft_actor_pending(const weft_actor *h) {
  const weft_actor *a = h ? record_of(h) : NULL;
  return a ? a->len : 0;
}

/* ---- waiting for the end ---------------------------------------------- */
int weft_actor_wait(weft_actor *h) {
  weft_task *t = weft__running_task();
  if (!h || !t)
    return -EINVAL;
  /* As for a send: the thread first, then the record's state. */
  const weft_loop *loop = address_of(h)->loop;
  if (!weft__callers(loop, loop->thread))
    return -EINVAL;
  int rc = weft__checkpoint();
  /* An actor still releasing its mailbox has not ended yet, for this. */
  weft_actor *a = record_unfinished(h);
  if (rc < 0 || !a)
    return rc; /* a stale handle is an actor that has ended */
  if (t == a->rec)
    return -EDEADLK;
  weft__queued w;
  return weft__park_queued(&w, t, &a->enders, &a->enders_tail, WAIT_ACTOR_END,
                           a);
}
