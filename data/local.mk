# data/: bundled model and hardware descriptions, installed under $(pkgdatadir).
modelsdir = $(pkgdatadir)/models
dist_models_DATA = $(sort $(wildcard $(srcdir)/data/models/*.json))
hwdir = $(pkgdatadir)/hw
dist_hw_DATA = $(sort $(wildcard $(srcdir)/data/hw/*.json))
calibrationdir = $(pkgdatadir)/calibration
dist_calibration_DATA = $(sort $(wildcard $(srcdir)/data/calibration/*.csv))
validationdir = $(pkgdatadir)/validation
dist_validation_DATA = $(sort $(wildcard $(srcdir)/data/validation/*.csv))
