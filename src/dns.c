/*
 * Layer 5: name resolution. getaddrinfo blocks (it may ask a DNS server
 * and wait for seconds), so inside a task it runs on the executor's pool
 * (libco #122: a resolver call that stalls every coroutine of the thread).
 * The job owns copies of the arguments: a cancelled caller returns at once,
 * and the lookup frees its own list when it finishes.
 */
#include "internal.h"

#include <errno.h>
#include <netdb.h>
#include <string.h>

typedef struct lookup {
  const char *node, *service; /* into text[], or NULL */
  struct addrinfo hints;
  int has_hints;
  int rc;  /* getaddrinfo's */
  int err; /* errno, for EAI_SYSTEM */
  struct addrinfo *res;
  char text[];
} lookup;

/* getaddrinfo's EAI_* code as a negative errno (the header lists them). */
static int eai_errno(int rc, int err) {
  switch (rc) {
  case 0: return 0;
  case EAI_NONAME:
  case EAI_SERVICE:
#ifdef EAI_NODATA
  case EAI_NODATA:
#endif
#ifdef EAI_ADDRFAMILY
  case EAI_ADDRFAMILY:
#endif
    return -ENOENT;
  case EAI_AGAIN: return -EAGAIN;
  case EAI_FAIL: return -EIO;
  case EAI_MEMORY: return -ENOMEM;
  case EAI_FAMILY: return -EAFNOSUPPORT;
  case EAI_SOCKTYPE: return -ESOCKTNOSUPPORT;
  case EAI_BADFLAGS: return -EINVAL;
  case EAI_SYSTEM: return err ? -err : -EIO;
  default: return -EIO;
  }
}

static void *resolve(void *arg) {
  lookup *l = arg;
  l->rc = getaddrinfo(l->node, l->service, l->has_hints ? &l->hints : NULL,
                      &l->res);
  l->err = l->rc == EAI_SYSTEM ? errno : 0;
  return l;
}

static void lookup_free(void *result, void *unused) {
  lookup *l = result;
  (void)unused;
  if (l->rc == 0 && l->res)
    freeaddrinfo(l->res);
  weft__free(l);
}

int weft_getaddrinfo(const char *node, const char *service,
                     const struct addrinfo *hints, struct addrinfo **res) {
  if (!res)
    return -EINVAL;
  *res = NULL;
  if (!weft__running_task()) {
    int rc = getaddrinfo(node, service, hints, res);
    return eai_errno(rc, errno);
  }
  int rc = weft__checkpoint();
  if (rc < 0)
    return rc;
  size_t nlen = node ? strlen(node) + 1 : 0;
  size_t slen = service ? strlen(service) + 1 : 0;
  lookup *l = weft__malloc(sizeof *l + nlen + slen);
  if (!l)
    return -ENOMEM;
  memset(l, 0, sizeof *l);
  if (node)
    l->node = memcpy(l->text, node, nlen);
  if (service)
    l->service = memcpy(l->text + nlen, service, slen);
  if (hints) {
    /* Only these four may be set in hints (getaddrinfo(3)). */
    l->hints.ai_flags = hints->ai_flags;
    l->hints.ai_family = hints->ai_family;
    l->hints.ai_socktype = hints->ai_socktype;
    l->hints.ai_protocol = hints->ai_protocol;
    l->has_hints = 1;
  }
  weft_submit_opts opts = {.release = lookup_free};
  int queued;
  rc = weft__run_in_thread(resolve, l, NULL, &opts, &queued,
                           WEFT__JOB_CHECK | WEFT__JOB_DROP);
  if (rc < 0) {
    if (!queued)
      weft__free(l); /* else lookup_free's, when the job ends */
    return rc;
  }
  rc = eai_errno(l->rc, l->err);
  if (rc == 0)
    *res = l->res;
  weft__free(l);
  return rc;
}
