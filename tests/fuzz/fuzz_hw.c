/* fuzz_hw.c: hardware descriptions.  One that loads has every number in its
 * physical range (sp_hw_validate) and finite efficiencies; one that does not
 * names the field. */
#include <math.h>
#include "fuzz.h"
#include "sp_hw.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fuzz_strdup(data, size);
    sp_hw hw;
    sp_error err;
    sp_error_init(&err);
    sp_status st = sp_hw_loads(text, 0, &hw, &err);
    free(text);
    FUZZ_ASSERT(st == SP_OK || st == SP_EINVAL || st == SP_EPARSE || st == SP_ENOTSUP);
    if (st != SP_OK) {
        FUZZ_ASSERT(err.text[0]);
        return 0;
    }
    FUZZ_ASSERT(sp_hw_validate(&hw, NULL) == SP_OK);
    FUZZ_ASSERT(hw.peak_flops[SP_DT_BF16] > 0 && isfinite(hw.peak_flops[SP_DT_BF16]));
    FUZZ_ASSERT(hw.hbm_bytes > 0 && hw.hbm_bw > 0 && isfinite(hw.hbm_bw));
    for (double f = 1; f < 1e30; f *= 1e3) {
        double e = sp_hw_matmul_eff(&hw, f);
        FUZZ_ASSERT(e > 0 && e <= 1);
    }
    return 0;
}
