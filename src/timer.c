/*
 * Layer 3: timers and callbacks.
 *
 * Timers are records, kept in chunks the loop owns (so arming allocates
 * nothing in the steady state and a record never moves), ordered by a
 * 4-ary min-heap of (deadline, seq, id) entries. The key is in the entry,
 * not behind a pointer: sifting compares entries that sit side by side,
 * and the four children of a node share one cache line, because the heap
 * array starts three entries past a 64-byte boundary:
 *
 *   line:   | pad pad pad [0] | [1] [2] [3] [4] | [5] [6] [7] [8] | ...
 *                          root  children of 0    children of 1
 *
 * `seq` counts armings, so equal deadlines fire in the order they were set.
 * It is 32 bits to keep an entry at 16 bytes; before it wraps, the heap is
 * sorted (a sorted array is a valid heap) and renumbered 0..n-1.
 *
 * A re-arm to a later key is lazy, as Go's runtime does it: only the
 * record learns the new key, and the heap entry keeps the old one. An
 * entry's key is thus never later than its record's, so the root is still
 * the earliest entry; when it is stale, it gets its record's key and sinks
 * (settle_root), before anything reads the root as the next deadline. A
 * timeout pushed back on every message (an idle timer) then costs one
 * store per push, not a sift, and sinks once per time it reaches the root.
 *
 * Deadlines are measured from the loop's clock (loop->now, read once per
 * turn), as libuv does, so timers set in one turn with the same delay tie.
 * A delay <= 0 counts as 1 ns: such a timer fires at the next turn, never in
 * the turn that is firing timers now (a callback re-arming itself with no
 * delay cannot starve the loop).
 */
#include "internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define TIMER_CHUNK 1024u /* record ids per chunk */
#define NOT_ARMED   UINT32_MAX

/* A timer record is in two parts: what moving the timer touches (its key,
 * where it is in the heap, the handle's generation), 24 bytes, and what
 * only arming and firing touch (the callback), 16, each in its own array
 * in the record's chunk. A lazy re-arm touches only the first: one line.
 *
 * The first array is aligned to a power of two, so a record's address
 * gives its chunk: the chunk's first slot holds a header (the loop, the
 * chunk's number), and the record's id is the chunk's number and its slot.
 * So the record need store neither, and a re-arm learns the id without
 * reading the heap entry it is about to overwrite. The handle is the
 * record's address. */
struct weft__timer_rec {
  int64_t deadline; /* the key: its heap entry's, or later (lazy re-arm) */
  uint32_t seq;     /* ... and its rank among equal deadlines */
  uint32_t pos;     /* heap index while armed, else NOT_ARMED */
  uint16_t gen;     /* handle generation, bumped when freed */
};

typedef union timer_call {
  struct {
    void (*cb)(void *); /* what to run ... */
    void *arg;          /* ... with this */
  } armed;
  uint32_t next_free; /* free: id + 1 of the next free record (0: none) */
} timer_call;

typedef struct timer_chunk_head {
  weft_loop *loop; /* the loop its records belong to */
  void *mem;       /* the allocation it is in */
  /* Its number: its records' ids are index * TIMER_CHUNK + slot. */
  uint32_t index;
} timer_chunk_head;

#define REC_BYTES (TIMER_CHUNK * sizeof(weft__timer_rec))
#define REC_ALIGN 32768u /* the records' alignment: a power of two */
#define REC_FIRST                                                              \
  ((uint32_t)((sizeof(timer_chunk_head) + sizeof(weft__timer_rec) - 1) /       \
              sizeof(weft__timer_rec))) /* the header's slots */
#define CHUNK_MEM (REC_ALIGN + REC_BYTES + TIMER_CHUNK * sizeof(timer_call))

_Static_assert(sizeof(weft__timer_rec) == 24, "24-byte records");
_Static_assert(REC_BYTES <= REC_ALIGN,
               "a chunk's records within its alignment");
_Static_assert((REC_ALIGN & (REC_ALIGN - 1)) == 0, "a power of two");

static inline timer_chunk_head *head_of(const weft__timer_rec *r) {
  return (timer_chunk_head *)((uintptr_t)r & ~(uintptr_t)(REC_ALIGN - 1));
}

static inline uint32_t slot_of(const weft__timer_rec *r) {
  return (uint32_t)(((uintptr_t)r & (REC_ALIGN - 1)) / sizeof *r);
}

static inline uint32_t id_of(const weft__timer_rec *r) {
  return head_of(r)->index * TIMER_CHUNK + slot_of(r);
}

static inline weft_loop *loop_of(const weft__timer_rec *r) {
  return head_of(r)->loop;
}

static inline timer_call *call_of(const weft__timer_rec *r) {
  return (timer_call *)((char *)head_of(r) + REC_BYTES) + slot_of(r);
}

static inline weft__timer_rec *rec_at(const weft_loop *loop, uint32_t id) {
  return &loop->timer_chunks[id / TIMER_CHUNK][id % TIMER_CHUNK];
}

/* ---- handles: the record's address, its generation in the top bits ---- */
#if UINTPTR_MAX > 0xffffffffu
#define GEN_SHIFT 48
static weft_timer *handle_of(weft__timer_rec *r) {
  return (weft_timer *)((uintptr_t)r | ((uintptr_t)r->gen << GEN_SHIFT));
}
static weft__timer_rec *rec_of(weft_timer *h) {
  weft__timer_rec *r =
      (weft__timer_rec *)((uintptr_t)h & ((((uintptr_t)1) << GEN_SHIFT) - 1));
  return r->gen == (uint16_t)((uintptr_t)h >> GEN_SHIFT) ? r : NULL;
}
#else
static weft_timer *handle_of(weft__timer_rec *r) { return (weft_timer *)r; }
static weft__timer_rec *rec_of(weft_timer *h) { return (weft__timer_rec *)h; }
#endif

/* ---- records ---------------------------------------------------------- */
static int add_chunk(weft_loop *loop) {
  uint32_t n = loop->timer_nchunks;
  if ((uint64_t)(n + 1) * TIMER_CHUNK >= NOT_ARMED)
    return -ENOMEM;
  weft__timer_rec **v = weft__realloc(loop->timer_chunks, (n + 1) * sizeof *v);
  if (!v)
    return -ENOMEM;
  loop->timer_chunks = v;
  /* Room to align the records to REC_BYTES, then the records, then their
   * callbacks. The pages of the slack that are never touched cost none. */
  void *mem = weft__malloc(CHUNK_MEM);
  if (!mem)
    return -ENOMEM;
  uintptr_t base =
      ((uintptr_t)mem + REC_ALIGN - 1) & ~(uintptr_t)(REC_ALIGN - 1);
  weft__timer_rec *c = (weft__timer_rec *)base;
  timer_chunk_head *head = (timer_chunk_head *)base;
  head->loop = loop;
  head->mem = mem;
  head->index = n;
  v[n] = c;
  loop->timer_nchunks = n + 1;
  for (uint32_t i = TIMER_CHUNK; i-- > REC_FIRST;) {
    c[i].gen = 0;
    c[i].pos = NOT_ARMED;
    call_of(&c[i])->next_free = loop->timer_free;
    loop->timer_free = n * TIMER_CHUNK + i + 1;
  }
  return 0;
}

/* A free record, its id in *id. */
static weft__timer_rec *rec_new(weft_loop *loop, uint32_t *id) {
  if (!loop->timer_free && add_chunk(loop) < 0)
    return NULL;
  *id = loop->timer_free - 1;
  weft__timer_rec *r = rec_at(loop, *id);
  loop->timer_free = call_of(r)->next_free;
  return r;
}

#define RETIRED UINT32_MAX /* next_free of a record never to be reused */

static void rec_free(weft_loop *loop, weft__timer_rec *r, uint32_t id) {
  r->pos = NOT_ARMED;
  loop->timer_frees++;
  /* As with tasks: a generation that wrapped would revive a stale handle,
   * so such a record is retired (1 in 65,536 recycles). */
  if (++r->gen == 0) {
    call_of(r)->next_free = RETIRED;
    return;
  }
  call_of(r)->next_free = loop->timer_free;
  loop->timer_free = id + 1;
}

/* No timer is armed: put the free list back in address order. After a
 * burst of timers that fired in deadline order, the list hands out records
 * scattered over all the chunks, a cache and TLB miss each; in order, the
 * next timers get neighbouring records. Done only once half as many
 * records were freed as exist, so it costs O(1) per timer. */
static void sort_free_list(weft_loop *loop) {
  uint32_t total = loop->timer_nchunks * TIMER_CHUNK;
  if (loop->timer_nchunks < 2 || loop->timer_frees < total / 2)
    return;
  loop->timer_frees = 0;
  loop->timer_free = 0;
  for (uint32_t id = total; id-- > 0;) {
    if (id % TIMER_CHUNK < REC_FIRST)
      continue; /* the chunk's header */
    timer_call *c = call_of(rec_at(loop, id));
    if (c->next_free == RETIRED)
      continue;
    c->next_free = loop->timer_free;
    loop->timer_free = id + 1;
  }
}

/* ---- the heap --------------------------------------------------------- */
static inline int less(const weft__heap_entry *a, const weft__heap_entry *b) {
  /* Without a branch: which is earlier is a coin toss in a heap. */
  return (a->deadline < b->deadline) |
         ((a->deadline == b->deadline) & (a->seq < b->seq));
}

/* Sifting moves a hole, not an entry: the entry being placed is held in a
 * register (never stored and reloaded, which would wait for its cache line
 * to come in), each entry it passes moves one step and tells its record
 * where it went, and the entry is written once, where it ends. Both return
 * that place; the caller tells the entry's record (it often has it at
 * hand, and need not write it if the entry stayed where it was). */
static inline void moved_to(weft_loop *loop, uint32_t pos,
                            const weft__heap_entry *from) {
  loop->heap[pos] = *from;
  rec_at(loop, from->id)->pos = pos;
}

static uint32_t sift_up(weft_loop *loop, uint32_t pos, weft__heap_entry e) {
  weft__heap_entry *h = loop->heap;
  while (pos > 0) {
    uint32_t parent = (pos - 1) / 4;
    if (!less(&e, &h[parent]))
      break;
    moved_to(loop, pos, &h[parent]);
    pos = parent;
  }
  h[pos] = e;
  return pos;
}

/* The earliest of the children c .. end-1 (at least one). */
static inline uint32_t earliest_child(const weft__heap_entry *h, uint32_t c,
                                      uint32_t end) {
  if (end - c == 4) {
    uint32_t a = less(&h[c + 1], &h[c]) ? c + 1 : c;
    uint32_t b = less(&h[c + 3], &h[c + 2]) ? c + 3 : c + 2;
    return less(&h[b], &h[a]) ? b : a;
  }
  uint32_t best = c;
  for (uint32_t i = c + 1; i < end; i++)
    best = less(&h[i], &h[best]) ? i : best;
  return best;
}

static uint32_t sift_down(weft_loop *loop, uint32_t pos, weft__heap_entry e) {
  weft__heap_entry *h = loop->heap;
  uint32_t n = loop->heap_len;
  for (;;) {
    uint32_t c = 4 * pos + 1;
    if (c >= n)
      break;
    uint32_t end = c + 4 < n ? c + 4 : n;
    /* While the children are compared, fetch their children (one cache
     * line each): the next level's loads start a level early. The sift is
     * memory-bound once the heap outgrows the cache. */
    if (4 * c + 1 < n)
      for (uint32_t g = c; g < end; g++)
        __builtin_prefetch(&h[4 * g + 1]);
    uint32_t best = earliest_child(h, c, end);
    if (!less(&h[best], &e))
      break;
    moved_to(loop, pos, &h[best]);
    pos = best;
  }
  h[pos] = e;
  return pos;
}

/* Puts e at pos, whose old entry is gone, then where it belongs: up if it
 * is earlier than its parent, else down. Returns where it ended. */
static inline uint32_t sift(weft_loop *loop, uint32_t pos, weft__heap_entry e) {
  weft__heap_entry *h = loop->heap;
  uint32_t c = 4 * pos + 1;
  /* Fetch the children's line with the parent's: whichever way it goes,
   * the two misses overlap. */
  if (c < loop->heap_len)
    __builtin_prefetch(&h[c]);
  if (pos > 0 && less(&e, &h[(pos - 1) / 4]))
    return sift_up(loop, pos, e);
  if (c >= loop->heap_len) { /* a leaf, as three in four are */
    h[pos] = e;
    return pos;
  }
  return sift_down(loop, pos, e);
}

static int heap_grow(weft_loop *loop) {
  uint32_t cap = loop->heap_cap ? loop->heap_cap * 2 : 64;
  if (cap < loop->heap_cap || cap >= NOT_ARMED - 8)
    return -ENOMEM;
  /* Room for the alignment and the three entries of padding. */
  weft__heap_entry *mem = weft__malloc((cap + 8) * sizeof *mem);
  if (!mem)
    return -ENOMEM;
  uintptr_t base = ((uintptr_t)mem + 63) & ~(uintptr_t)63;
  weft__heap_entry *heap = (weft__heap_entry *)base + 3;
  if (loop->heap_len)
    memcpy(heap, loop->heap, loop->heap_len * sizeof *heap);
  weft__free(loop->heap_mem);
  loop->heap_mem = mem;
  loop->heap = heap;
  loop->heap_cap = cap;
  return 0;
}

static int by_key(const void *a, const void *b) {
  const weft__heap_entry *x = a, *y = b;
  return less(x, y) ? -1 : less(y, x) ? 1 : 0;
}

/* The sequence numbers are about to wrap: give every entry its record's
 * key (the lazy re-arms done), sort (a sorted array is a heap) and number
 * the entries afresh, keeping their order. */
static void renumber(weft_loop *loop) {
  weft__heap_entry *h = loop->heap;
  for (uint32_t i = 0; i < loop->heap_len; i++) {
    const weft__timer_rec *r = rec_at(loop, h[i].id);
    h[i].deadline = r->deadline;
    h[i].seq = r->seq;
  }
  qsort(h, loop->heap_len, sizeof *h, by_key);
  for (uint32_t i = 0; i < loop->heap_len; i++) {
    weft__timer_rec *r = rec_at(loop, h[i].id);
    h[i].seq = r->seq = i;
    r->pos = i;
  }
  loop->seq_next = loop->heap_len;
}

/* Is this entry's key older than its record's (a lazy re-arm)? */
static inline int stale(const weft__heap_entry *e, const weft__timer_rec *r) {
  return (e->deadline != r->deadline) | (e->seq != r->seq);
}

/* Until the root is up to date: give it its record's key and sink it. */
static void settle_root(weft_loop *loop) {
  while (loop->heap_len) {
    weft__heap_entry root = loop->heap[0];
    weft__timer_rec *r = rec_at(loop, root.id);
    if (!stale(&root, r))
      return;
    root.deadline = r->deadline;
    root.seq = r->seq;
    r->pos = sift_down(loop, 0, root);
  }
}

static void heap_remove(weft_loop *loop, uint32_t pos) {
  uint32_t last = --loop->heap_len;
  if (pos == last)
    return;
  weft__heap_entry moved = loop->heap[last];
  rec_at(loop, moved.id)->pos = sift(loop, pos, moved);
}

/* ---- arming ----------------------------------------------------------- */
int64_t weft__loop_clock(weft_loop *loop) {
  return loop->running ? weft__turn_now(loop) : weft__clock_of(loop);
}

static weft__timer_rec *arm(weft_loop *loop, int64_t deadline,
                            void (*cb)(void *), void *arg) {
  if (loop->heap_len == loop->heap_cap && heap_grow(loop) < 0)
    return NULL;
  uint32_t id;
  weft__timer_rec *r = rec_new(loop, &id);
  if (!r)
    return NULL;
  if (loop->seq_next == UINT32_MAX)
    renumber(loop);
  timer_call *c = call_of(r);
  c->armed.cb = cb;
  c->armed.arg = arg;
  r->deadline = deadline;
  r->seq = loop->seq_next++;
  uint32_t pos = loop->heap_len++;
  r->pos = sift_up(loop, pos, (weft__heap_entry){deadline, r->seq, id});
  return r;
}

static void disarm(weft_loop *loop, weft__timer_rec *r) {
  uint32_t id = id_of(r);
  heap_remove(loop, r->pos);
  rec_free(loop, r, id);
  if (loop->heap_len == 0)
    sort_free_list(loop);
}

/* The deadline `delay` after the loop's clock, at least 1 ns ahead and
 * never past WEFT_NEVER. */
static int64_t deadline_after(weft_loop *loop, int64_t delay) {
  int64_t now = weft__loop_clock(loop);
  if (delay < 1)
    delay = 1;
  return delay > WEFT_NEVER - now ? WEFT_NEVER : now + delay;
}

weft_timer *weft_call_at(int64_t deadline, void (*cb)(void *), void *arg) {
  weft_loop *loop = weft_loop_current();
  if (!cb || !loop) {
    errno = EINVAL;
    return NULL;
  }
  int64_t earliest = deadline_after(loop, 1);
  weft__timer_rec *r =
      arm(loop, deadline < earliest ? earliest : deadline, cb, arg);
  if (!r) {
    errno = ENOMEM;
    return NULL;
  }
  return handle_of(r);
}

weft_timer *weft_call_later(int64_t delay, void (*cb)(void *), void *arg) {
  weft_loop *loop = weft_loop_current();
  if (!cb || !loop) {
    errno = EINVAL;
    return NULL;
  }
  weft__timer_rec *r = arm(loop, deadline_after(loop, delay), cb, arg);
  if (!r) {
    errno = ENOMEM;
    return NULL;
  }
  return handle_of(r);
}

int weft_timer_cancel(weft_timer *h) {
  if (!h)
    return -EINVAL;
  weft__timer_rec *r = rec_of(h);
  if (!r || r->pos == NOT_ARMED)
    return -ENOENT;
  disarm(loop_of(r), r);
  return 0;
}

int weft_timer_rearm(weft_timer *h, int64_t delay) {
  if (!h)
    return -EINVAL;
  weft__timer_rec *r = rec_of(h);
  if (!r || r->pos == NOT_ARMED)
    return -ENOENT;
  weft_loop *loop = loop_of(r);
  if (loop->seq_next == UINT32_MAX)
    renumber(loop);
  /* The new sequence number orders it after every timer set before, as if
   * it had just been set; so a deadline no earlier than the record's is a
   * later key, and the entry's (no later than the record's) still holds
   * it back enough: lazy, the record alone changes. */
  int64_t deadline = deadline_after(loop, delay);
  uint32_t seq = loop->seq_next++;
  int later = deadline >= r->deadline;
  r->deadline = deadline;
  r->seq = seq;
  if (later)
    return 0;
  /* Earlier than the record's key; if also earlier than the entry's, the
   * entry takes it and rises (its children were no earlier than its old
   * key). */
  uint32_t pos = r->pos;
  weft__heap_entry e = {deadline, seq, id_of(r)};
  if (!less(&e, &loop->heap[pos]))
    return 0;
  uint32_t to = sift_up(loop, pos, e);
  if (to != pos)
    r->pos = to;
  return 0;
}

void weft__timer_seq_set(weft_loop *loop, uint32_t seq) {
  loop->seq_next = seq;
}

WEFT__HOT int64_t weft__timers_next(weft_loop *loop) {
  settle_root(loop);
  return loop->heap_len ? loop->heap[0].deadline : WEFT_NEVER;
}

WEFT__HOT void weft__timers_fire(weft_loop *loop) {
  /* Re-read the heap every time: a callback may arm or cancel timers, or
   * stop the loop (as may a callback that ran before this). */
  while (!loop->stop && loop->heap_len && loop->heap[0].deadline <= loop->now) {
    weft__heap_entry *h = loop->heap;
    uint32_t id = h[0].id;
    weft__timer_rec *r = rec_at(loop, id);
    if (stale(&h[0], r)) {
      settle_root(loop); /* re-armed later: not due yet, perhaps */
      continue;
    }
    timer_call *c = call_of(r);
    void (*cb)(void *) = c->armed.cb;
    void *arg = c->armed.arg;
    /* The next to fire is the earliest child of the root (its line is in
     * the cache): fetch its callback now, while the heap is sifted. The
     * sift brings its record into the cache (moving it to the root), but
     * not its callback, which is in the other part of the chunk. */
    if (loop->heap_len > 2) {
      uint32_t end = loop->heap_len < 5 ? loop->heap_len : 5;
      __builtin_prefetch(
          call_of(rec_at(loop, h[earliest_child(h, 1, end)].id)));
    }
    heap_remove(loop, 0);
    rec_free(loop, r, id);
    if (loop->heap_len == 0)
      sort_free_list(loop);
    cb(arg);
  }
}

/* ---- for the layers above ------------------------------------------- */
weft__timer_rec *weft__timer_arm(weft_loop *loop, int64_t deadline,
                                 void (*cb)(void *), void *arg) {
  return arm(loop, deadline, cb, arg);
}

void weft__timer_disarm(weft__timer_rec *r) { disarm(loop_of(r), r); }

/* ---- callbacks -------------------------------------------------------- */
static int cbs_grow(weft_loop *loop) {
  size_t cap = loop->cb_cap ? loop->cb_cap * 2 : 64;
  weft__callback *v = weft__malloc(cap * sizeof *v);
  if (!v)
    return -ENOMEM;
  /* Unwrap the ring into the new array. */
  for (size_t i = 0; i < loop->cb_len; i++)
    v[i] = loop->cbs[(loop->cb_head + i) % loop->cb_cap];
  weft__free(loop->cbs);
  loop->cbs = v;
  loop->cb_cap = cap;
  loop->cb_head = 0;
  return 0;
}

int weft_call_soon(void (*cb)(void *), void *arg) {
  weft_loop *loop = weft_loop_current();
  if (!cb || !loop)
    return -EINVAL;
  if (loop->cb_len + loop->cb_reserved == loop->cb_cap && cbs_grow(loop) < 0)
    return -ENOMEM;
  size_t tail = (loop->cb_head + loop->cb_len) % loop->cb_cap;
  loop->cbs[tail] = (weft__callback){cb, arg};
  loop->cb_len++;
  return 0;
}

int weft__call_soon_reserve(weft_loop *loop) {
  if (loop->cb_len + loop->cb_reserved == loop->cb_cap && cbs_grow(loop) < 0)
    return -ENOMEM;
  loop->cb_reserved++;
  return 0;
}

void weft__call_soon_unreserve(weft_loop *loop) { loop->cb_reserved--; }

void weft__call_soon_reserved(weft_loop *loop, void (*cb)(void *), void *arg) {
  loop->cb_reserved--;
  size_t tail = (loop->cb_head + loop->cb_len) % loop->cb_cap;
  loop->cbs[tail] = (weft__callback){cb, arg};
  loop->cb_len++;
}

void weft__call_soon_first(weft_loop *loop, void (*cb)(void *), void *arg) {
  loop->cb_reserved--;
  loop->cb_head = (loop->cb_head + loop->cb_cap - 1) % loop->cb_cap;
  loop->cbs[loop->cb_head] = (weft__callback){cb, arg};
  loop->cb_len++;
}

WEFT__HOT void weft__callbacks_run(weft_loop *loop) {
  /* Only those queued before this turn: later ones wait for the next. */
  for (size_t n = loop->cb_len; n > 0 && !loop->stop; n--) {
    weft__callback c = loop->cbs[loop->cb_head];
    loop->cb_head = (loop->cb_head + 1) % loop->cb_cap;
    loop->cb_len--;
    c.cb(c.arg);
  }
}

void weft__timers_free(weft_loop *loop) {
  for (uint32_t i = 0; i < loop->timer_nchunks; i++)
    weft__free(head_of(loop->timer_chunks[i])->mem);
  weft__free(loop->timer_chunks);
  weft__free(loop->heap_mem);
  weft__free(loop->cbs);
  loop->timer_chunks = NULL;
  loop->timer_nchunks = 0;
  loop->timer_free = 0;
  loop->heap_mem = loop->heap = NULL;
  loop->heap_len = loop->heap_cap = 0;
  loop->cbs = NULL;
  loop->cb_len = loop->cb_cap = loop->cb_head = loop->cb_reserved = 0;
}
