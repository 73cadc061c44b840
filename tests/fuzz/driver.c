/* driver.c: replays inputs through a harness without libFuzzer, so the
 * regression corpus (tests/fuzz/regress/<harness>/) and the seeds run in
 * `make check` with any C compiler.  Arguments: files or directories (each
 * regular file in a directory is one input). */
#include <dirent.h>
#include <sys/stat.h>
#include "fuzz.h"

static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "driver: cannot open %s\n", path);
        return 1;
    }
    size_t cap = 1 << 16, n = 0;
    uint8_t *buf = malloc(cap);
    for (size_t r; buf && (r = fread(buf + n, 1, cap - n, f)) > 0;) {
        n += r;
        if (n == cap && !(buf = realloc(buf, cap *= 2))) break;
    }
    fclose(f);
    if (!buf) return 1;
    LLVMFuzzerTestOneInput(buf, n);   /* a broken promise aborts */
    free(buf);
    return 0;
}

int main(int argc, char **argv)
{
    int n = 0, bad = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            fprintf(stderr, "driver: no %s\n", argv[i]);
            return 1;
        }
        if (!S_ISDIR(st.st_mode)) {
            bad += run_file(argv[i]);
            n++;
            continue;
        }
        DIR *d = opendir(argv[i]);
        for (struct dirent *e; d && (e = readdir(d));) {
            if (e->d_name[0] == '.') continue;
            char p[4096];
            snprintf(p, sizeof p, "%s/%s", argv[i], e->d_name);
            if (stat(p, &st) == 0 && S_ISREG(st.st_mode)) {
                bad += run_file(p);
                n++;
            }
        }
        if (d) closedir(d);
    }
    printf("%s: %d inputs replayed, %d unreadable\n", argv[0], n, bad);
    return bad || n == 0;
}
