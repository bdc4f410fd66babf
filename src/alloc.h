/*
 * The one allocator. Every allocation weft makes goes through these, so a
 * user can replace them (weft_replace_allocator) and a test can make the
 * n-th one fail and check that nothing leaks or crashes.
 */
#ifndef WEFT_ALLOC_H
#define WEFT_ALLOC_H

#include <stddef.h>

void *weft__malloc(size_t size);
void *weft__calloc(size_t n, size_t size);
void *weft__realloc(void *p, size_t size);
void weft__free(void *p);
char *weft__strdup(const char *s);

/* The free function in force now. What outlives every weft object (a
 * thread's stack pool, kept until its loop is freed or the thread exits)
 * keeps the one that goes with the allocator that made it, and frees with
 * it: the allocator may be replaced meanwhile (weft.h allows that once no
 * weft object is alive). */
typedef void (*weft__free_fn)(void *);
weft__free_fn weft__free_fn_now(void);

#endif
