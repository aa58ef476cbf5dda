// The arena behind everything the SDK hands out: a bump allocator over malloc'd chunks, freed
// whole when the guest's call returns. Why: a guest then never frees SDK memory (no leaks, no
// double frees), and an allocation is a pointer bump; the host discards the instance after the
// call anyway.
#include <stdlib.h>
#include <string.h>

#include "rg_internal.h"

#define ALIGN 8
#define FIRST_CHUNK 4096
#define LARGEST_CHUNK (64 * 1024)

typedef struct chunk {
  struct chunk *next;
  size_t cap;
  size_t used;
} chunk_t;

// Chunk data starts after the header, rounded up to ALIGN (the header is 12 bytes on wasm32).
#define HEADER ((sizeof(chunk_t) + ALIGN - 1) & ~(size_t)(ALIGN - 1))

static chunk_t *chunks;  // newest first
static size_t next_cap = FIRST_CHUNK;

typedef struct adopted {
  struct adopted *next;
  void *ptr;
} adopted_t;

static adopted_t *adopted;  // in the chunks

void *rg_alloc(size_t size) {
  if (size > SIZE_MAX - HEADER - ALIGN) rg_fatal("out of memory");
  size = (size + ALIGN - 1) & ~(size_t)(ALIGN - 1);
  if (chunks == NULL || chunks->cap - chunks->used < size) {
    size_t cap = size > next_cap ? size : next_cap;
    chunk_t *chunk = malloc(HEADER + cap);
    if (chunk == NULL) rg_fatal("out of memory");
    *chunk = (chunk_t){.next = chunks, .cap = cap, .used = 0};
    chunks = chunk;
    if (next_cap < LARGEST_CHUNK) next_cap *= 2;
  }
  void *p = (char *)chunks + HEADER + chunks->used;
  chunks->used += size;
  return p;
}

const char *rg_strndup(const char *text, size_t len) {
  char *copy = rg_alloc(len + 1);
  if (len > 0) memcpy(copy, text, len);
  copy[len] = '\0';
  return copy;
}

void rg_arena_adopt(void *ptr) {
  adopted_t *a = rg_alloc(sizeof *a);
  *a = (adopted_t){.next = adopted, .ptr = ptr};
  adopted = a;
}

void rg_arena_free(void) {
  for (; adopted != NULL; adopted = adopted->next) free(adopted->ptr);
  while (chunks != NULL) {
    chunk_t *next = chunks->next;
    free(chunks);
    chunks = next;
  }
  next_cap = FIRST_CHUNK;
  rg_last_error_clear();  // its text was in the arena
}
