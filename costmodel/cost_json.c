/* cost_json.c: the machine-readable form of a priced layout. */
#include <jansson.h>
#include "costmodel/sp_cost.h"

static json_t *phase_json(const sp_phase_cost *p)
{
    json_t *o = json_object();
    json_object_set_new(o, "time_s", json_real(p->time_s));
    json_object_set_new(o, "compute_s", json_real(p->compute_s));
    json_object_set_new(o, "memory_s", json_real(p->memory_s));
    json_object_set_new(o, "roofline_s", json_real(p->roofline_s));
    json_object_set_new(o, "dispatch_s", json_real(p->dispatch_s));
    json_object_set_new(o, "comm_s", json_real(p->comm_s));
    for (int k = 0; k < SP_COLL_COUNT; k++)
        json_object_set_new(o, sp_coll_kind_name((sp_coll_kind)k), json_real(p->coll_s[k]));
    return o;
}

static json_t *mem_json(const sp_mem_sizes *m, int64_t capacity)
{
    json_t *mem = json_object();
    json_object_set_new(mem, "weights", json_integer(m->weights));
    json_object_set_new(mem, "gathered_weights", json_integer(m->gathered_weights));
    json_object_set_new(mem, "kv", json_integer(m->kv));
    json_object_set_new(mem, "activations", json_integer(m->activations));
    json_object_set_new(mem, "workspace", json_integer(m->workspace));
    json_object_set_new(mem, "total", json_integer(m->total));
    json_object_set_new(mem, "capacity", json_integer(capacity));
    return mem;
}

void *sp_cost_to_json(const sp_cost *c, const sp_layout *l)
{
    json_t *o = json_object();
    char text[512];
    json_object_set_new(o, "layout", l ? (json_t *)sp_layout_to_json(l) : json_null());
    if (l) json_object_set_new(o, "layout_text", json_string(sp_layout_format(l, text, sizeof text)));
    json_object_set_new(o, "chips", json_integer(c->chips));
    json_object_set_new(o, "feasible", json_boolean(c->feasible));
    json_object_set_new(o, "shortfall_bytes", json_integer(c->shortfall_bytes));
    json_object_set_new(o, "prefill_s", json_real(c->prefill_s));
    json_object_set_new(o, "decode_step_s", json_real(c->decode_step_s));
    json_object_set_new(o, "decode_s", json_real(c->decode_s));
    json_object_set_new(o, "total_s", json_real(c->total_s));
    json_object_set_new(o, "tokens_per_s", json_real(c->tokens_per_s));
    json_object_set_new(o, "mfu", json_real(c->mfu));
    json_object_set_new(o, "mfu_prefill", json_real(c->mfu_prefill));
    json_object_set_new(o, "mfu_decode", json_real(c->mfu_decode));
    json_object_set_new(o, "cost_chip_s_per_token", json_real(c->cost_chip_s_per_token));
    json_object_set_new(o, "comm_bytes_per_chip", json_pack("{sIsI}", "prefill", (json_int_t)c->comm_bytes_prefill,
                                                            "decode_step", (json_int_t)c->comm_bytes_decode_step));
    if (c->torus.slice[0] > 0)
        json_object_set_new(o, "torus_slice", json_pack("[iii]", c->torus.slice[0], c->torus.slice[1], c->torus.slice[2]));
    json_t *tb = json_object();
    json_object_set_new(tb, "prefill", phase_json(&c->prefill));
    json_object_set_new(tb, "decode_step", phase_json(&c->decode));
    json_object_set_new(o, "time_breakdown", tb);
    json_object_set_new(o, "memory_per_chip", mem_json(&c->mem, c->capacity));
    if (c->disaggregated) {
        /* separate prefill and decode groups (sp_cost.h) */
        json_object_set_new(o, "kv_transfer_s", json_real(c->kv_transfer_s));
        json_object_set_new(o, "kv_transfer_bytes", json_integer(c->kv_transfer_bytes));
        json_object_set_new(o, "latency_s", json_real(c->total_s));
        json_object_set_new(o, "period_s", json_real(c->period_s));
        json_t *g = json_object();
        for (int p = 0; p < SP_PHASE_COUNT; p++) {
            json_t *x = json_object();
            json_object_set_new(x, "chips", json_integer(c->group_chips[p]));
            json_object_set_new(x, "feasible", json_boolean(c->group_feasible[p]));
            json_object_set_new(x, "shortfall_bytes", json_integer(c->group_shortfall[p]));
            json_object_set_new(x, "memory_per_chip", mem_json(&c->group_mem[p], c->capacity));
            json_object_set_new(g, sp_phase_name((sp_phase)p), x);
        }
        json_object_set_new(o, "groups", g);
    }
    if (c->host_peak > 0 || c->prefill.host_bytes > 0 || c->decode.host_bytes > 0) {
        /* offload: what lives in host memory, what crosses the host link, and whether it bounds the step */
        json_t *off = json_object();
        json_object_set_new(off, "host_weights_bytes", json_integer(c->mem.host_weights));
        json_object_set_new(off, "host_kv_bytes", json_integer(c->mem.host_kv));
        json_object_set_new(off, "host_bytes_peak", json_integer(c->host_peak));
        json_object_set_new(off, "host_capacity", json_integer(c->host_capacity));
        json_object_set_new(off, "host_shortfall_bytes", json_integer(c->host_shortfall_bytes));
        json_object_set_new(off, "staging_bytes", json_integer(c->mem.staging));
        json_object_set_new(off, "prefill_host_link_bytes", json_integer(c->prefill.host_bytes));
        json_object_set_new(off, "prefill_host_link_s", json_real(c->prefill.host_s));
        json_object_set_new(off, "prefill_host_bound", json_boolean(sp_cost_host_bound(&c->prefill)));
        json_object_set_new(off, "decode_step_host_link_bytes", json_integer(c->decode.host_bytes));
        json_object_set_new(off, "decode_step_host_link_s", json_real(c->decode.host_s));
        json_object_set_new(off, "decode_step_host_bound", json_boolean(sp_cost_host_bound(&c->decode)));
        json_object_set_new(o, "offload", off);
    }
    return o;
}
