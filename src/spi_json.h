/*
 * spi_json.h: internal helpers for reading descriptions with Jansson and
 * reporting precise errors (not installed).
 *
 * Every getter takes the JSON pointer of the enclosing object (prefix, "" at
 * the top) and the key, and on failure fills sp_error with the source, the
 * field's path and what would have been accepted:
 *     /topology/inter_node_bw: missing field (bytes/s > 0)
 *     /ffn: must be one of gelu, swiglu
 * Optional fields that are absent (or JSON null) leave *out untouched and
 * return SP_OK, so callers set defaults first.
 */
#ifndef SPI_JSON_H
#define SPI_JSON_H
#include <stdint.h>
#include <jansson.h>
#include "sp_common.h"

struct sp_model;
struct sp_hw;

typedef struct spi_jctx {
    const char *source;   /* file name or "<string>" */
    sp_error *err;        /* may be NULL */
} spi_jctx;

/* Parse with JSON_REJECT_DUPLICATES; errors read "file:line:column: message".
 * Returns a new reference in *out. */
sp_status spi_json_load_file(const char *path, json_t **out, sp_error *err);
sp_status spi_json_loads(const char *text, const char *source, json_t **out, sp_error *err);

/* Fails with the path when j is not an object. */
sp_status spi_json_expect_object(const spi_jctx *c, const char *path, const json_t *j);

/* Rejects keys of obj not in allowed (NULL-terminated), listing the allowed
 * ones.  "source", "notes" and "comment" are always allowed. */
sp_status spi_json_check_keys(const spi_jctx *c, const char *prefix, const json_t *obj,
                              const char *const *allowed);

/* Integer in [min, max]; integral reals (3e9) are accepted. */
sp_status spi_json_get_int(const spi_jctx *c, const char *prefix, const json_t *obj, const char *key,
                           int required, int64_t min, int64_t max, const char *what, int64_t *out);
/* Finite number; with positive set it must be > 0, else >= min. */
sp_status spi_json_get_num(const spi_jctx *c, const char *prefix, const json_t *obj, const char *key,
                           int required, int positive, double min, double max, const char *what,
                           double *out);
sp_status spi_json_get_bool(const spi_jctx *c, const char *prefix, const json_t *obj, const char *key,
                            int required, int *out);
/* Copies into buf; too long is an error. */
sp_status spi_json_get_str(const spi_jctx *c, const char *prefix, const json_t *obj, const char *key,
                           int required, char *buf, size_t size);
/* One of names[0..n) (case-sensitive); *out is the index. */
sp_status spi_json_get_enum(const spi_jctx *c, const char *prefix, const json_t *obj, const char *key,
                            int required, const char *const *names, int n, int *out);
/* Borrowed reference to obj[key] (NULL when optional and absent), checked
 * to have the given type (JSON_OBJECT, JSON_ARRAY). */
sp_status spi_json_get_child(const spi_jctx *c, const char *prefix, const json_t *obj, const char *key,
                             int required, json_type type, json_t **out);

/* Error helper: fills c->err for prefix/key with the formatted text. */
sp_status spi_json_fail(const spi_jctx *c, sp_status code, const char *prefix, const char *key,
                        const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* ---- description readers shared between model.c, model_hf.c and the CLI ---- */

/* Hugging Face config.json -> model (model_hf.c).  Not validated. */
sp_status spi_model_from_hf(const spi_jctx *c, const json_t *root, struct sp_model *m);
/* A document is a HF config when it has "model_type" or "architectures". */
int spi_json_is_hf_config(const json_t *root);
/* Validation with the source recorded in the error. */
sp_status spi_model_validate_src(const struct sp_model *m, const char *source, sp_error *err);
/* The keys of shardplan's model format and of its rope_scaling object
 * (NULL-terminated; tests walk them). */
const char *const *spi_model_keys(void);
const char *const *spi_model_rope_scaling_keys(void);

/* The description in shardplan's own format; new references. */
json_t *spi_model_to_json(const struct sp_model *m);
json_t *spi_hw_to_json(const struct sp_hw *hw);
/* The "calibration" section (hw_calib.c): read into hw->calibration, after
 * the rest of the profile (its values are checked against the fields);
 * written as a new reference, NULL when hw has none. */
sp_status spi_hw_read_calibration(const spi_jctx *c, const json_t *j, struct sp_hw *hw);
json_t *spi_hw_calibration_to_json(const struct sp_hw *hw);

#endif
