/* fuzz_safetensors.c: a safetensors file (8-byte header length, JSON header,
 * data).  The bytes go to an anonymous memory file opened by path, as a
 * checkpoint would be.  A file that opens has every tensor inside the data
 * section, sized by its shape and dtype, none overlapping another; one that
 * does not says why. */
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>
#include "fuzz.h"
#include "exec/sp_weights.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int fd = memfd_create("fuzz.safetensors", 0);
    FUZZ_ASSERT(fd >= 0);
    FUZZ_ASSERT(write(fd, data, size) == (ssize_t)size);
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    sp_safetensors *st = NULL;
    sp_error err;
    sp_error_init(&err);
    sp_status s = sp_safetensors_open(path, &st, &err);
    FUZZ_ASSERT(s == SP_OK || s == SP_EINVAL || s == SP_EPARSE || s == SP_EIO);
    if (s != SP_OK) {
        FUZZ_ASSERT(err.text[0] && !st);
        close(fd);
        return 0;
    }
    int n = sp_safetensors_count(st);
    for (int i = 0; i < n; i++) {
        const sp_st_tensor *t = sp_safetensors_at(st, i);
        FUZZ_ASSERT(t && t->name && t->offset >= 8 && t->offset + t->nbytes <= size);
        FUZZ_ASSERT(sp_safetensors_find(st, t->name) != NULL);
        for (int k = 0; k < i; k++) {   /* no two tensors share a byte */
            const sp_st_tensor *u = sp_safetensors_at(st, k);
            FUZZ_ASSERT(t->nbytes == 0 || u->nbytes == 0 || t->offset >= u->offset + u->nbytes ||
                        u->offset >= t->offset + t->nbytes);
        }
        /* a readable 2-D tensor reads back its first row */
        if (t->dt >= 0 && t->ndim == 2 && t->shape[0] > 0 && t->shape[1] > 0 && t->shape[1] <= 4096) {
            float row[4096];
            sp_status r = sp_safetensors_read_rows_cols(st, t, 0, 1, 0, t->shape[1], 0, row, NULL);
            FUZZ_ASSERT(r == SP_OK);
        }
    }
    sp_safetensors_close(st);
    close(fd);
    return 0;
}
