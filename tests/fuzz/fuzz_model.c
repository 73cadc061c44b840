/* fuzz_model.c: model descriptions, shardplan's JSON and Hugging Face
 * config.json (sp_model_loads takes both).  A description that loads has
 * every derived size representable and non-negative; one that does not
 * says why. */
#include "fuzz.h"
#include "sp_model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fuzz_strdup(data, size);
    sp_model m;
    sp_error err;
    sp_error_init(&err);
    sp_status st = sp_model_loads(text, 0, &m, &err);
    free(text);
    FUZZ_ASSERT(st == SP_OK || st == SP_EINVAL || st == SP_EPARSE || st == SP_ENOTSUP);
    if (st != SP_OK) {
        FUZZ_ASSERT(err.text[0]);
        return 0;
    }
    FUZZ_ASSERT(sp_model_validate(&m, NULL) == SP_OK);
    sp_model_stats s;
    int64_t ctxs[3] = {0, 1, m.max_context};
    for (int i = 0; i < 3; i++) {
        FUZZ_ASSERT(sp_model_derive(&m, ctxs[i], &s) == SP_OK);
        FUZZ_ASSERT(s.params_total > 0 && s.params_active > 0 && s.params_active <= s.params_total);
        FUZZ_ASSERT(s.weight_bytes_bf16 > 0 && s.kv_bytes_per_token > 0);
        FUZZ_ASSERT(s.matmul_flops_per_token >= 0 && s.attention_flops_per_token >= 0);
    }
    return 0;
}
