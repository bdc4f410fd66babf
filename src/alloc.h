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

#endif
