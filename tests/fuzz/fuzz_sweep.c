/* fuzz_sweep.c: sweep specs (sp_sweep_spec_loads), grid and list forms.  A
 * spec either loads, with at least one point and a compute kind in range,
 * or fails with a status the header lists and a message. */
#include "fuzz.h"
#include "sp_sweep.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fuzz_strdup(data, size);
    sp_sweep_spec *s = NULL;
    sp_error err;
    sp_error_init(&err);
    sp_status st = sp_sweep_spec_loads(text, &s, &err);
    free(text);
    FUZZ_ASSERT(st == SP_OK || st == SP_EINVAL || st == SP_EPARSE || st == SP_ENOTSUP || st == SP_ENOMEM ||
                st == SP_EIO);
    if (st != SP_OK) {
        FUZZ_ASSERT(err.text[0]);
        return 0;
    }
    FUZZ_ASSERT(sp_sweep_spec_points(s) >= 1);
    FUZZ_ASSERT((unsigned)sp_sweep_spec_compute(s) < SP_SWEEP_COMPUTE_COUNT);
    sp_sweep_spec_free(s);
    return 0;
}
