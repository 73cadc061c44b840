/* fuzz_layout.c: layouts, text form and JSON form (sp_layout_parse takes
 * both).  A layout that parses has a representable chip count, and its text
 * and JSON forms parse back to the same layout. */
#include <jansson.h>
#include "fuzz.h"
#include "sp_layout.h"

static void same(const sp_layout *a, const sp_layout *b)
{
    FUZZ_ASSERT(a->stages == b->stages && a->replicas == b->replicas && a->microbatches == b->microbatches);
    FUZZ_ASSERT(!memcmp(a->mesh, b->mesh, sizeof a->mesh) && !memcmp(a->placement, b->placement, sizeof a->placement));
    FUZZ_ASSERT(a->weights == b->weights && a->kv == b->kv);
    for (int p = 0; p < SP_PHASE_COUNT; p++)
        FUZZ_ASSERT(a->phase[p].ffn == b->phase[p].ffn && a->phase[p].attn == b->phase[p].attn);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fuzz_strdup(data, size);
    sp_layout l, back;
    sp_error err;
    sp_error_init(&err);
    sp_status st = sp_layout_parse(text, &l, &err);
    free(text);
    FUZZ_ASSERT(st == SP_OK || st == SP_EINVAL || st == SP_EPARSE);
    if (st != SP_OK) {
        FUZZ_ASSERT(err.text[0]);
        return 0;
    }
    int64_t chips = sp_layout_chips(&l);
    FUZZ_ASSERT(chips >= 1 || chips == -1);   /* -1: the product does not fit in 64 bits */
    char buf[512];
    FUZZ_ASSERT(sp_layout_parse(sp_layout_format(&l, buf, sizeof buf), &back, NULL) == SP_OK);
    same(&l, &back);
    json_t *j = sp_layout_to_json(&l);
    FUZZ_ASSERT(j && sp_layout_from_json(j, &back, NULL) == SP_OK);
    json_decref(j);
    same(&l, &back);
    return 0;
}
