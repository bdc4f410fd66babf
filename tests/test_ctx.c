/*
 * Layer 1: the raw context switch (src/ctx.h), with no generator or task
 * on top. Runs on every switch implementation: ctx_x86_64.S,
 * ctx_aarch64.S (under qemu-aarch64 too) and ucontext.
 *
 *  - values cross a switch in both directions, in order;
 *  - callee-saved integer and floating-point registers survive: two flows
 *    keep many live locals across thousands of switches, each with its own
 *    values, and must end with the result they compute without switching;
 *  - floating-point control state belongs to each flow: a rounding mode
 *    set in one does not leak into the other (MXCSR and the x87 control
 *    word on x86-64, FPCR on aarch64); a fresh context starts with the
 *    state its creator had when it made it;
 *  - a fresh context's stack is 16-byte aligned (printf of doubles uses
 *    aligned SSE stores on x86-64, and we check frame addresses);
 *  - weft__ctx_running() names the region that runs;
 *  - contexts nest, and a context can use most of its stack.
 */
#include "ctx.h"
#include "stack.h"

#include "check.h"

#include <fenv.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>

static weft__ctx main_ctx, a_ctx, b_ctx;
static weft__stack *a_stack, *b_stack;

static void new_ctx(weft__ctx *c, weft__stack **sp, void (*entry)(void *)) {
  *sp = weft__stack_acquire(0);
  CHECK(*sp != NULL);
  weft__ctx_make(c, &(*sp)->region, entry);
}

/* ---- values across a switch ------------------------------------------ */
#define PING_ROUNDS 1000

static void ping_entry(void *arg) {
  weft__ctx_started(&a_ctx);
  CHECK_PTR_EQ(weft__ctx_running(), &a_stack->region);
  intptr_t v = (intptr_t)arg;
  CHECK_EQ(v, 7);
  for (intptr_t i = 0; i < PING_ROUNDS; i++) {
    /* hand out 3v+i, expect main to answer with v' = that + 1 */
    intptr_t sent = 3 * v + i;
    v = (intptr_t)weft__ctx_switch(&a_ctx, &main_ctx, (void *)sent);
    CHECK_EQ(v, sent + 1);
    CHECK_PTR_EQ(weft__ctx_running(), &a_stack->region);
    v %= 100003;
  }
  weft__ctx_exit(&a_ctx, &main_ctx, (void *)(intptr_t)-5);
}

static void test_ping(void) {
  weft__region *outside = weft__ctx_running();
  CHECK(outside != NULL);
  new_ctx(&a_ctx, &a_stack, ping_entry);
  intptr_t v = 7;
  intptr_t got = (intptr_t)weft__ctx_switch(&main_ctx, &a_ctx, (void *)v);
  for (intptr_t i = 0; i < PING_ROUNDS; i++) {
    CHECK_EQ(got, 3 * v + i);
    CHECK_PTR_EQ(weft__ctx_running(), outside);
    v = (got + 1) % 100003;
    got = (intptr_t)weft__ctx_switch(&main_ctx, &a_ctx, (void *)(got + 1));
  }
  CHECK_EQ(got, -5);
  CHECK_PTR_EQ(weft__ctx_running(), outside);
  weft__stack_release(a_stack);
}

/* ---- callee-saved registers ------------------------------------------
 * mix() keeps 16 integers and 10 doubles live across every switch: more
 * than there are callee-saved registers, so the compiler puts some in
 * rbx/rbp/r12-r15 (x19-x28 and d8-d15 on aarch64) and spills the rest.
 * The two flows run mix() with different seeds at the same time; if a
 * switch lost or swapped a register, one flow would compute with the
 * other's value, and its result would differ from the one computed
 * without switching. */
typedef void *(*switch_fn)(weft__ctx *, weft__ctx *, void *);

static void *no_switch(weft__ctx *from, weft__ctx *to, void *arg) {
  (void)from;
  (void)to;
  return arg;
}

static void *real_switch(weft__ctx *from, weft__ctx *to, void *arg) {
  return weft__ctx_switch(from, to, arg);
}

static volatile switch_fn sw_real = real_switch, sw_none = no_switch;

__attribute__((noinline)) static double mix(switch_fn sw, weft__ctx *self,
                                            weft__ctx *other,
                                            unsigned long seed, int rounds) {
  unsigned long a = seed * 3 + 1, b = seed ^ 0x5555, c = seed * 7 - 2,
                d = seed + 11;
  unsigned long e = seed * 13, f = seed ^ 0x1234, g = seed * 17 + 5,
                h = seed - 99;
  unsigned long i = seed * 19, j = seed ^ 0x7777, k = seed * 23 + 3,
                l = seed + 1000;
  unsigned long m = seed * 29, n = seed ^ 0x3c3c, o = seed * 31 - 7,
                p = seed + 77;
  double x0 = (double)seed * 0.5, x1 = (double)seed + 0.25;
  double x2 = (double)seed * 1.5, x3 = (double)seed - 0.75;
  double x4 = (double)seed * 2.5, x5 = (double)seed + 3.125;
  double x6 = (double)seed * 0.125, x7 = (double)seed - 8.5;
  double x8 = (double)seed * 4.0, x9 = (double)seed + 0.0625;
  for (int r = 0; r < rounds; r++) {
    sw(self, other, (void *)(intptr_t)r);
    a += b ^ r;
    b += c;
    c ^= d + r;
    d += e;
    e += f * 3;
    f ^= g;
    g += h;
    h += i ^ r;
    i += j;
    j ^= k;
    k += l;
    l += m;
    m ^= n + r;
    n += o;
    o += p;
    p ^= a;
    /* Contractive (coefficients sum below 1): the values stay finite. */
    x0 = x0 * 0.5 + x1 * 0.25 + r;
    x1 = x1 * 0.5 + x2 * 0.25 - r;
    x2 = x2 * 0.5 + x3 * 0.25 + 1.0;
    x3 = x3 * 0.5 + x4 * 0.25 - 2.0;
    x4 = x4 * 0.5 + x5 * 0.25 + 0.5 * r;
    x5 = x5 * 0.5 + x6 * 0.25 + 3.0;
    x6 = x6 * 0.5 + x7 * 0.25 - 0.25 * r;
    x7 = x7 * 0.5 + x8 * 0.25 + 5.0;
    x8 = x8 * 0.5 + x9 * 0.25 - 7.0;
    x9 = x9 * 0.5 + x0 * 0.25 + 0.125 * r;
  }
  unsigned long s =
      (a + b + c + d + e + f + g + h + i + j + k + l + m + n + o + p);
  return (double)(s % 1000003) +
         (x0 + x1 + x2 + x3 + x4 + x5 + x6 + x7 + x8 + x9) * 1e-3;
}

#define MIX_ROUNDS 5000
#define SEED_MAIN  123456789UL
#define SEED_A     987654321UL
static double a_result;

static void mix_entry(void *arg) {
  weft__ctx_started(&a_ctx);
  (void)arg;
  a_result = mix(sw_real, &a_ctx, &main_ctx, SEED_A, MIX_ROUNDS);
  weft__ctx_exit(&a_ctx, &main_ctx, NULL);
}

static void test_registers(void) {
  double want_main = mix(sw_none, NULL, NULL, SEED_MAIN, MIX_ROUNDS);
  double want_a = mix(sw_none, NULL, NULL, SEED_A, MIX_ROUNDS);
  CHECK(want_main == want_main && want_a == want_a); /* not NaN */
  CHECK(want_main != want_a);
  new_ctx(&a_ctx, &a_stack, mix_entry);
  weft__ctx_switch(&main_ctx, &a_ctx, NULL); /* a runs to its first switch */
  double got_main = mix(sw_real, &main_ctx, &a_ctx, SEED_MAIN, MIX_ROUNDS);
  /* main's last switch resumed a, which finished and came back */
  if (got_main != want_main || a_result != want_a)
    fprintf(stderr, "main got %.17g, want %.17g; a got %.17g, want %.17g\n",
            got_main, want_main, a_result, want_a);
  CHECK(got_main == want_main);
  CHECK(a_result == want_a);
  weft__stack_release(a_stack);
}

/* ---- floating-point control state ------------------------------------
 * sse_round() is the rounding mode arithmetic uses (MXCSR on x86-64, FPCR
 * elsewhere); x87_round() the x87 control word's (x86 only, -1 elsewhere).
 * On x86-64 the two are separate registers and the switch must keep both:
 * context b sets them to different modes. */
static int sse_round(void) {
#if defined(__x86_64__)
  uint32_t mxcsr;
  __asm__ volatile("stmxcsr %0" : "=m"(mxcsr));
  return (int)((mxcsr >> 3) & 0xc00); /* RC bits 13-14 -> FE_* */
#else
  return fegetround();
#endif
}

static int x87_round(void) {
#if defined(__x86_64__)
  uint16_t cw;
  __asm__ volatile("fnstcw %0" : "=m"(cw));
  return cw & 0xc00; /* RC bits 10-11, the FE_* values */
#else
  return -1;
#endif
}

static void x87_set_round(int mode) {
#if defined(__x86_64__)
  uint16_t cw;
  __asm__ volatile("fnstcw %0" : "=m"(cw));
  cw = (uint16_t)((cw & ~0xc00) | mode);
  __asm__ volatile("fldcw %0" : : "m"(cw));
#else
  (void)mode;
#endif
}

/* What lrint (which rounds in the current mode) makes of a few values,
 * packed into one number per mode. */
static volatile double half = 2.5, neg_half = -2.5, frac = 2.75;
static long rounding_signature(void) {
  return lrint(half) * 100 + lrint(neg_half) * 10 + lrint(frac);
}
#define SIG_NEAREST  (2 * 100 - 2 * 10 + 3)
#define SIG_UPWARD   (3 * 100 - 2 * 10 + 3)
#define SIG_DOWNWARD (2 * 100 - 3 * 10 + 2)
#define SIG_TOWZERO  (2 * 100 - 2 * 10 + 2)

#if defined(__x86_64__)
#define X87_IN_B FE_TOWARDZERO
#else
#define X87_IN_B (-1)
#endif

static void fp_entry(void *arg) {
  weft__ctx_started(&b_ctx);
  (void)arg;
  /* Made while main had FE_DOWNWARD: it starts with that. */
  CHECK_EQ(sse_round(), FE_DOWNWARD);
  CHECK_EQ(rounding_signature(), SIG_DOWNWARD);
  CHECK_EQ(fesetround(FE_UPWARD), 0);
  x87_set_round(FE_TOWARDZERO);
  for (int r = 0; r < 4; r++) {
    CHECK_EQ(sse_round(), FE_UPWARD);
    CHECK_EQ(x87_round(), X87_IN_B);
    CHECK_EQ(rounding_signature(), SIG_UPWARD);
    weft__ctx_switch(&b_ctx, &main_ctx, NULL);
  }
  CHECK_EQ(sse_round(), FE_UPWARD);
  CHECK_EQ(x87_round(), X87_IN_B);
  weft__ctx_exit(&b_ctx, &main_ctx, NULL);
}

static void test_fp_control(void) {
  static const int modes[4] = {FE_TONEAREST, FE_TOWARDZERO, FE_DOWNWARD,
                               FE_TONEAREST};
  static const long sigs[4] = {SIG_NEAREST, SIG_TOWZERO, SIG_DOWNWARD,
                               SIG_NEAREST};
  CHECK_EQ(fesetround(FE_DOWNWARD), 0);
  new_ctx(&b_ctx, &b_stack, fp_entry);
  CHECK_EQ(fesetround(FE_TONEAREST), 0);
  for (int r = 0; r < 4; r++) {
    CHECK_EQ(fesetround(modes[r]), 0);
    weft__ctx_switch(&main_ctx, &b_ctx, NULL);
    CHECK_EQ(sse_round(), modes[r]);
#if defined(__x86_64__)
    CHECK_EQ(x87_round(), modes[r]);
#endif
    CHECK_EQ(fegetround(), modes[r]);
    CHECK_EQ(rounding_signature(), sigs[r]);
  }
  CHECK_EQ(fesetround(FE_TONEAREST), 0);
  weft__ctx_switch(&main_ctx, &b_ctx, NULL); /* b checks and exits */
  CHECK_EQ(sse_round(), FE_TONEAREST);
  CHECK_EQ(rounding_signature(), SIG_NEAREST);
  weft__stack_release(b_stack);
}

/* ---- alignment of a fresh stack -------------------------------------- */
static volatile uintptr_t seen_addr;

__attribute__((noinline)) static int aligned_local(void) {
  _Alignas(16) char buf[16];
  seen_addr = (uintptr_t)buf; /* through a volatile: not folded away */
  buf[0] = 1;
  return (int)(seen_addr & 15) + buf[0] - 1;
}

__attribute__((noinline)) static void check_frame(const weft__region *r) {
  volatile uintptr_t fa = (uintptr_t)__builtin_frame_address(0);
  CHECK_EQ(fa & 15, 0);
  CHECK_GE(fa, (uintptr_t)r->lo);
  CHECK_LT(fa, (uintptr_t)r->lo + r->size);
  CHECK_EQ(aligned_local(), 0);
  /* Variadic doubles: on x86-64 the callee spills xmm registers with
   * movaps, which faults on a misaligned stack. */
  char out[64];
  volatile double d = 1.5;
  volatile long double ld = 2.25L;
  snprintf(out, sizeof out, "%.2f %.3Lf %d", d, ld, 7);
  CHECK_STR_EQ(out, "1.50 2.250 7");
}

static void align_entry(void *arg) {
  weft__ctx_started(&a_ctx);
  /* The entry's own frame, then one call deeper. */
  volatile uintptr_t fa = (uintptr_t)__builtin_frame_address(0);
  CHECK_EQ(fa & 15, 0);
  check_frame(&a_stack->region);
  weft__ctx_exit(&a_ctx, &main_ctx, arg);
}

static void test_alignment(void) {
  /* Several sizes: the top of the stack moves with each. */
  static const size_t sizes[] = {0, 16384, 65536 + 4096, 100000, 131072};
  for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
    a_stack = weft__stack_acquire(sizes[i]);
    CHECK(a_stack != NULL);
    weft__ctx_make(&a_ctx, &a_stack->region, align_entry);
    void *r = weft__ctx_switch(&main_ctx, &a_ctx, (void *)(uintptr_t)(i + 40));
    CHECK_EQ((uintptr_t)r, i + 40);
    weft__stack_release(a_stack);
  }
}

/* ---- nesting: main -> a -> b -> a -> main -> a -> b ends -> a ends --- */
static char trace[64];
static size_t ntrace;

static void note(char c) {
  CHECK_LT(ntrace, sizeof trace - 1);
  trace[ntrace++] = c;
}

static void nest_b(void *arg) {
  weft__ctx_started(&b_ctx);
  CHECK_EQ((intptr_t)arg, 2);
  CHECK_PTR_EQ(weft__ctx_running(), &b_stack->region);
  note('b');
  void *v = weft__ctx_switch(&b_ctx, &a_ctx, (void *)3);
  CHECK_EQ((intptr_t)v, 6);
  note('B');
  weft__ctx_exit(&b_ctx, &a_ctx, (void *)7);
}

static void nest_a(void *arg) {
  weft__ctx_started(&a_ctx);
  CHECK_EQ((intptr_t)arg, 1);
  note('a');
  new_ctx(&b_ctx, &b_stack, nest_b);
  void *v = weft__ctx_switch(&a_ctx, &b_ctx, (void *)2);
  CHECK_EQ((intptr_t)v, 3);
  CHECK_PTR_EQ(weft__ctx_running(), &a_stack->region);
  note('a');
  v = weft__ctx_switch(&a_ctx, &main_ctx, (void *)4);
  CHECK_EQ((intptr_t)v, 5);
  note('a');
  v = weft__ctx_switch(&a_ctx, &b_ctx, (void *)6);
  CHECK_EQ((intptr_t)v, 7);
  note('A');
  weft__stack_release(b_stack); /* b has exited: its stack is free */
  weft__ctx_exit(&a_ctx, &main_ctx, (void *)8);
}

static void test_nesting(void) {
  weft__region *outside = weft__ctx_running();
  ntrace = 0;
  new_ctx(&a_ctx, &a_stack, nest_a);
  note('m');
  void *v = weft__ctx_switch(&main_ctx, &a_ctx, (void *)1);
  CHECK_EQ((intptr_t)v, 4);
  CHECK_PTR_EQ(weft__ctx_running(), outside);
  note('m');
  v = weft__ctx_switch(&main_ctx, &a_ctx, (void *)5);
  CHECK_EQ((intptr_t)v, 8);
  note('M');
  trace[ntrace] = '\0';
  CHECK_STR_EQ(trace, "mabamaBAM");
  weft__stack_release(a_stack);
}

/* ---- using most of a stack ------------------------------------------- */
__attribute__((noinline)) static unsigned long deep(int n) {
  volatile unsigned char buf[1024];
  __asm__ volatile("" : : "r"(buf) : "memory"); /* kept whole (clang) */
  for (size_t i = 0; i < sizeof buf; i += 64)
    buf[i] = (unsigned char)(n + i);
  if (n == 0)
    return buf[0];
  return deep(n - 1) + buf[64];
}

static void deep_entry(void *arg) {
  weft__ctx_started(&a_ctx);
  unsigned long want = (unsigned long)(uintptr_t)arg;
  /* 160 frames of > 1 KiB each: well over half of the 256 KiB stack. */
  CHECK_EQ(deep(160), want);
  weft__ctx_switch(&a_ctx, &main_ctx, NULL);
  CHECK_EQ(deep(160), want);
  weft__ctx_exit(&a_ctx, &main_ctx, NULL);
}

static void test_deep(void) {
  unsigned long want = deep(160); /* on the thread's stack */
  new_ctx(&a_ctx, &a_stack, deep_entry);
  weft__ctx_switch(&main_ctx, &a_ctx, (void *)(uintptr_t)want);
  CHECK_EQ(deep(160), want); /* a's frames did not touch ours */
  weft__ctx_switch(&main_ctx, &a_ctx, NULL);
  weft__stack_release(a_stack);
}

/* ---- a million switches ---------------------------------------------- */
static void count_entry(void *arg) {
  weft__ctx_started(&a_ctx);
  uintptr_t n = (uintptr_t)arg;
  for (;;)
    n = (uintptr_t)weft__ctx_switch(&a_ctx, &main_ctx, (void *)(n + 1));
}

static void test_many(void) {
  long rounds = RUNNING_ON_VALGRIND ? 100000 : 1000000;
  new_ctx(&a_ctx, &a_stack, count_entry);
  uintptr_t n = 0;
  for (long i = 0; i < rounds; i++)
    n = (uintptr_t)weft__ctx_switch(&main_ctx, &a_ctx, (void *)n);
  CHECK_EQ(n, rounds);
  /* a is abandoned suspended: its stack just goes back to the pool. */
  weft__stack_release(a_stack);
}

int main(void) {
  test_ping();
  test_registers();
  test_fp_control();
  test_alignment();
  test_nesting();
  test_deep();
  test_many();
  CHECK_EQ(weft__stack_trim(), 1);
  printf("ok\n");
  return 0;
}
