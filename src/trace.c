/* trace.c: Chrome Trace Event JSON writer and the step id / label convention (sp_trace.h). */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "spi_common.h"
#include "sp_trace.h"

static const char *const part_names[SP_PART_COUNT] = {"pre", "layer", "post", "dense"};
_Static_assert(SPI_ARRAY_LEN(part_names) == SP_PART_COUNT, "one name per sp_prog_part");

const char *sp_prog_part_name(sp_prog_part p) { return (unsigned)p < SP_PART_COUNT ? part_names[p] : "?"; }

char *sp_trace_step_id(sp_phase phase, int64_t token, sp_prog_part part, int64_t layer, int index, char *buf,
                       size_t size)
{
    return sp_trace_step_id_pass(phase, token, -1, part, layer, index, buf, size);
}

char *sp_trace_step_id_pass(sp_phase phase, int64_t token, int64_t pass, sp_prog_part part, int64_t layer, int index,
                            char *buf, size_t size)
{
    if (!buf || size == 0) return buf;
    char ph[32];
    if (phase == SP_PHASE_DECODE) snprintf(ph, sizeof ph, "decode%lld", (long long)(token > 0 ? token : 0));
    else if (pass >= 0) snprintf(ph, sizeof ph, "%s%lld", sp_phase_name(phase), (long long)pass);
    else snprintf(ph, sizeof ph, "%s", sp_phase_name(phase));
    int n = snprintf(buf, size, "%s/%s/%lld/%d", ph, sp_prog_part_name(part),
                     (long long)(part == SP_PART_LAYER || part == SP_PART_DENSE ? layer : -1), index);
    if (n < 0 || (size_t)n >= size) buf[0] = '\0';
    return buf;
}

void sp_trace_xfer_id(int send, int peer, char *id, char *label)
{
    snprintf(id, SP_TRACE_ID_MAX, "kv/%s/-1/%d", send ? "send" : "recv", peer);
    snprintf(label, SP_TRACE_LABEL_MAX, "%s kv", send ? "send" : "recv");
}

int sp_trace_step_stream(const sp_step *s)
{
    return s->kind == SP_STEP_COLL || s->kind == SP_STEP_SEND || s->kind == SP_STEP_RECV ? SP_TRACE_COMM
                                                                                          : SP_TRACE_COMPUTE;
}

char *sp_trace_step_label(const sp_step *s, char *buf, size_t size)
{
    if (!buf || size == 0) return buf;
    if (s->kind == SP_STEP_MATMUL)
        snprintf(buf, size, "matmul %s", sp_weight_name(s->weight));
    else if (s->kind == SP_STEP_COLL)
        snprintf(buf, size, "%s%s", sp_coll_kind_name(s->coll.kind), s->coll.is_weight ? " weights" : "");
    else
        snprintf(buf, size, "%s", sp_step_kind_name(s->kind));
    return buf;
}

int64_t sp_trace_step_bytes(const sp_step *s)
{
    if (sp_trace_step_stream(s) == SP_TRACE_COMM)
        return s->coll.bytes_sent > s->coll.bytes_recv ? s->coll.bytes_sent : s->coll.bytes_recv;
    return s->weight_bytes + s->kv_bytes_read + s->kv_bytes_written + s->act_bytes;
}

struct sp_trace {
    FILE *f;
    int own;          /* f opened by sp_trace_open */
    int first;        /* no event written yet: no comma before the next */
    int failed;       /* a write failed */
    pthread_mutex_t mu;
};

/* Writes s as a JSON string body (labels and ids are ours, but a caller's
 * string must not break the file). */
static void put_json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fputc('"', f);
}

static void sep(sp_trace *t)
{
    fputs(t->first ? "\n" : ",\n", t->f);
    t->first = 0;
}

static sp_status trace_start(FILE *f, int own, int first_chip, int n_chips, sp_trace **out)
{
    if (!out) return spi_fail(SP_EINVAL, "sp_trace_open: NULL output");
    *out = NULL;
    if (first_chip < 0 || n_chips < 0) {
        if (own) fclose(f);
        return spi_fail(SP_EINVAL, "sp_trace_open: chips %d..%d", first_chip, first_chip + n_chips - 1);
    }
    sp_trace *t = calloc(1, sizeof *t);
    if (!t) {
        if (own) fclose(f);
        return spi_fail(SP_ENOMEM, "sp_trace_open: out of memory");
    }
    t->f = f;
    t->own = own;
    t->first = 1;
    pthread_mutex_init(&t->mu, NULL);
    fputs("{\"displayTimeUnit\":\"ns\",\"traceEvents\":[", f);
    static const char *const streams[SP_TRACE_STREAMS] = {"compute", "comm"};
    for (int c = first_chip; c < first_chip + n_chips; c++) {
        sep(t);
        fprintf(f, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"name\":\"chip %d\"}}", c, c);
        sep(t);
        fprintf(f, "{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"sort_index\":%d}}", c, c);
        for (int k = 0; k < SP_TRACE_STREAMS; k++) {
            sep(t);
            fprintf(f, "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":\"%s\"}}", c, k,
                    streams[k]);
        }
    }
    if (ferror(f)) t->failed = 1;
    *out = t;
    return SP_OK;
}

sp_status sp_trace_open(const char *path, int first_chip, int n_chips, sp_trace **out)
{
    if (out) *out = NULL;
    if (!path) return spi_fail(SP_EINVAL, "sp_trace_open: NULL path");
    FILE *f = fopen(path, "w");
    if (!f) return spi_fail(SP_EIO, "%s: cannot create the trace file", path);
    return trace_start(f, 1, first_chip, n_chips, out);
}

sp_status sp_trace_open_stream(FILE *f, int first_chip, int n_chips, sp_trace **out)
{
    if (!f) return spi_fail(SP_EINVAL, "sp_trace_open_stream: NULL stream");
    return trace_start(f, 0, first_chip, n_chips, out);
}

sp_status sp_trace_write(sp_trace *t, const sp_trace_event *e)
{
    if (!t || !e) return spi_fail(SP_EINVAL, "sp_trace_write: NULL argument");
    if (e->stream < 0 || e->stream >= SP_TRACE_STREAMS)
        return spi_fail(SP_EINVAL, "sp_trace_write: stream %d (0 compute, 1 comm)", e->stream);
    if (!(e->ts_s >= 0) || !(e->dur_s >= 0) || !isfinite(e->ts_s) || !isfinite(e->dur_s))
        return spi_fail(SP_EINVAL, "sp_trace_write: time %g + %g s", e->ts_s, e->dur_s);
    pthread_mutex_lock(&t->mu);
    sep(t);
    fputs("{\"name\":", t->f);
    put_json_str(t->f, e->name ? e->name : "");
    fprintf(t->f, ",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":%.6f,\"dur\":%.6f,\"args\":{", e->chip, e->stream,
            e->ts_s * 1e6, e->dur_s * 1e6);
    if (e->id) {
        fputs("\"id\":", t->f);
        put_json_str(t->f, e->id);
        fputc(',', t->f);
    }
    fprintf(t->f, "\"mb\":%d,\"bytes\":%lld,\"flops\":%lld}}", e->mb, (long long)e->bytes, (long long)e->flops);
    if (ferror(t->f)) t->failed = 1;
    pthread_mutex_unlock(&t->mu);
    return SP_OK;
}

sp_status sp_trace_close(sp_trace *t)
{
    if (!t) return SP_OK;
    fputs("\n]}\n", t->f);
    int bad = t->failed || ferror(t->f);
    if (t->own) bad |= fclose(t->f) != 0;
    else bad |= fflush(t->f) != 0;
    pthread_mutex_destroy(&t->mu);
    free(t);
    return bad ? spi_fail(SP_EIO, "trace: a write failed (disk full?)") : SP_OK;
}
