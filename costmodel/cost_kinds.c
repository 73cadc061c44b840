/* cost_kinds.c: predicted time per step class (sp_cost_kinds_eval, sp_cost.h),
 * for putting a prediction beside the executor's measured per-class totals. */
#include <stdlib.h>
#include <string.h>
#include "spi_common.h"
#include "costmodel/spi_cost.h"

/* Adds one program's step times per kind (× times) to out. */
static void add_program(sp_cost_cache *cache, const sp_program *p, const sp_hw *hw, int64_t context, double times,
                        double *out, spi_prog_run *run)
{
    const int64_t ctx[2] = {context, 0};
    spi_cost_price_program(cache, p, hw, ctx, run, NULL);
    for (int k = 0; k < SP_PART_COUNT; k++) {
        const sp_steps *ss = sp_program_part(p, (sp_prog_part)k);
        double n = (double)sp_program_part_runs(p, (sp_prog_part)k);
        for (int i = 0; i < ss->n; i++)
            out[sp_step_class_of(&ss->s[i])] += times * n * 1e-12 * (double)run->run[k][i].dur_ps[0];
    }
}

sp_status sp_cost_kinds_eval(const sp_model *m, const sp_hw *hw, const sp_layout *l, const sp_workload *w,
                             const sp_cost_opts *opts, sp_cost_kinds *out)
{
    if (!m || !hw || !l || !w || !out) return spi_fail(SP_EINVAL, "sp_cost_kinds_eval: NULL argument");
    sp_cost_opts defaults;
    if (!opts) {
        sp_cost_opts_init(&defaults);
        opts = &defaults;
    }
    memset(out, 0, sizeof *out);
    sp_program *prog = malloc(sizeof *prog);
    spi_prog_run *run = malloc(sizeof *run);
    if (!prog || !run) {
        free(prog);
        free(run);
        return spi_fail(SP_ENOMEM, "sp_cost_kinds_eval: out of memory");
    }
    int64_t max_ctx = w->prompt + w->gen;
    sp_shape pf_sh = {w->batch, w->prompt, w->prompt, max_ctx, opts->act_dtype, 0};
    sp_shape dc_sh = {w->batch, 1, max_ctx, max_ctx, opts->act_dtype, 0};
    sp_status st = SP_OK;
    for (int s = 0; s < l->stages && !st; s++) {
        if (w->prompt > 0 && !(st = sp_lower(m, l, SP_PHASE_PREFILL, &pf_sh, s, prog))) {
            /* every pass of every micro-batch (sp_lower_pass_terms) */
            int64_t left[3], num[3];
            int nt = sp_lower_pass_terms(prog, left, num);
            for (int i = 0; i < nt && !st; i++) {
                sp_shape ps = pf_sh;
                ps.passes_left = left[i];
                if (i && (st = sp_lower(m, l, SP_PHASE_PREFILL, &ps, s, prog))) break;
                add_program(opts->cache, prog, hw, 0, (double)l->microbatches * (double)num[i] / 2, out->prefill, run);
            }
        }
        if (!st && w->gen > 0 && !(st = sp_lower(m, l, SP_PHASE_DECODE, &dc_sh, s, prog)))
            add_program(opts->cache, prog, hw, max_ctx, (double)l->microbatches, out->decode_step, run);
    }
    free(prog);
    free(run);
    return st;
}
