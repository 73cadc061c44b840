# data/: bundled model and hardware descriptions, installed under $(pkgdatadir).
modelsdir = $(pkgdatadir)/models
dist_models_DATA = $(sort $(wildcard $(srcdir)/data/models/*.json))
hwdir = $(pkgdatadir)/hw
dist_hw_DATA = $(sort $(wildcard $(srcdir)/data/hw/*.json))
calibrationdir = $(pkgdatadir)/calibration
dist_calibration_DATA = $(sort $(wildcard $(srcdir)/data/calibration/*.csv))
validationdir = $(pkgdatadir)/validation
dist_validation_DATA = $(sort $(wildcard $(srcdir)/data/validation/*.csv))
validatedir = $(pkgdatadir)/validate
dist_validate_DATA = $(srcdir)/data/validate/local.cases $(srcdir)/data/validate/gpu.cases

# Refits the bundled profiles to the shipped training sets and lends the
# A100-80GB fit's overheads to the other GPUs (doc/fidelity.md).  The fit
# always starts from each profile's uncalibrated values, so this is
# idempotent; tests/check_fit fails when the profiles and a refit disagree.
calibrate-profiles: shardplan$(EXEEXT)
	./shardplan calibrate --fit $(srcdir)/data/calibration/a100-80g-fastertransformer.csv --hw a100-80g \
	    --out $(srcdir)/data/hw/a100-80g.json
	for h in a100-40g h100 h200; do \
	    ./shardplan calibrate --share a100-80g --hw $$h --out $(srcdir)/data/hw/$$h.json || exit 1; done
	./shardplan calibrate --fit $(srcdir)/data/calibration/tpu-v4-pope.csv --hw tpu-v4 \
	    --out $(srcdir)/data/hw/tpu-v4.json
.PHONY: calibrate-profiles
sweepsdir = $(pkgdatadir)/sweeps
dist_sweeps_DATA = $(sort $(wildcard $(srcdir)/data/sweeps/*.json))
