/* Layer 0: the one allocator; see alloc.h. */
#include "alloc.h"

#include "weft.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void *(*malloc_fn)(size_t) = malloc;
static void *(*realloc_fn)(void *, size_t) = realloc;
static void (*free_fn)(void *) = free;

int weft_replace_allocator(void *(*m)(size_t), void *(*r)(void *, size_t),
                           void (*f)(void *)) {
  if (!m || !r || !f)
    return -EINVAL;
  malloc_fn = m;
  realloc_fn = r;
  free_fn = f;
  return 0;
}

/* A replaced allocator need not set errno, and weft's contract says a
 * failed constructor does: so every failure here sets ENOMEM itself. */
void *weft__malloc(size_t size) {
  void *p = malloc_fn(size ? size : 1);
  if (!p)
    errno = ENOMEM;
  return p;
}

void *weft__calloc(size_t n, size_t size) {
  if (size && n > SIZE_MAX / size) {
    errno = ENOMEM;
    return NULL;
  }
  void *p = weft__malloc(n * size);
  if (p)
    memset(p, 0, n * size);
  return p;
}

void *weft__realloc(void *p, size_t size) {
  void *q = realloc_fn(p, size ? size : 1);
  if (!q)
    errno = ENOMEM;
  return q;
}

void weft__free(void *p) {
  if (p)
    free_fn(p);
}

weft__free_fn weft__free_fn_now(void) { return free_fn; }

char *weft__strdup(const char *s) {
  size_t n = strlen(s) + 1;
  char *d = weft__malloc(n);
  if (d)
    memcpy(d, s, n);
  return d;
}
