# tests/report.mk: the report verb: structure and figures checked with
# xmllint (cli_report.sh), and the page rendered by headless chromium
# (browser_report.sh; skips without chromium).
TESTS += tests/cli_report.sh tests/browser_report.sh
EXTRA_DIST += tests/cli_report.sh tests/browser_report.sh
