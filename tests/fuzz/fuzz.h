/* fuzz.h: shared by the libFuzzer harnesses (tests/fuzz/fuzz_*.c) and the
 * plain driver that replays their corpora in `make check` (driver.c).
 *
 * Each harness defines LLVMFuzzerTestOneInput(data, size): it feeds the bytes
 * to one parser and checks what the parser promises (a status in range, a
 * message on failure, honest figures on success).  A broken promise aborts,
 * which libFuzzer and the driver both report as a failure. */
#ifndef SP_FUZZ_H
#define SP_FUZZ_H
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A promise the parser broke: say which and abort. */
#define FUZZ_ASSERT(cond)                                                                   \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            fprintf(stderr, "fuzz: %s:%d: %s does not hold\n", __FILE__, __LINE__, #cond); \
            abort();                                                                       \
        }                                                                                  \
    } while (0)

/* The input as a NUL-terminated string (a copy; the caller frees). */
static inline char *fuzz_strdup(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    if (!s) abort();
    memcpy(s, data, size);
    s[size] = '\0';
    return s;
}
#endif
