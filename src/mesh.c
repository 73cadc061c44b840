/* mesh.c: mixed-radix ranks over the stage × replica × x × y × z mesh. */
#include <stdio.h>
#include "sp_mesh.h"

static const char *const axis_names[SP_AXIS_COUNT] = {"stage", "replica", "x", "y", "z"};

const char *sp_axis_name(sp_axis a) { return (a < SP_AXIS_COUNT) ? axis_names[a] : "?"; }

const char *sp_axes_str(unsigned mask, char *buf, int size)
{
    static const char letters[SP_AXIS_COUNT] = {'s', 'r', 'x', 'y', 'z'};
    int n = 0;
    for (int a = 0; a < SP_AXIS_COUNT && n < size - 1; a++)
        if (mask & (1u << a)) buf[n++] = letters[a];
    if (n == 0 && size > 1) buf[n++] = '-';
    buf[n] = '\0';
    return buf;
}

int sp_mesh_size(const sp_mesh *m)
{
    int n = 1;
    for (int a = 0; a < SP_AXIS_COUNT; a++) n *= m->dims[a];
    return n;
}

int sp_mesh_tp(const sp_mesh *m) { return m->dims[SP_AXIS_X] * m->dims[SP_AXIS_Y] * m->dims[SP_AXIS_Z]; }

void sp_mesh_coords(const sp_mesh *m, int rank, int coords[SP_AXIS_COUNT])
{
    for (int a = SP_AXIS_COUNT - 1; a >= 0; a--) {
        coords[a] = rank % m->dims[a];
        rank /= m->dims[a];
    }
}

int sp_mesh_rank(const sp_mesh *m, const int coords[SP_AXIS_COUNT])
{
    int r = 0;
    for (int a = 0; a < SP_AXIS_COUNT; a++) r = r * m->dims[a] + coords[a];
    return r;
}

int sp_mesh_group_size(const sp_mesh *m, unsigned mask)
{
    int n = 1;
    for (int a = 0; a < SP_AXIS_COUNT; a++)
        if (mask & (1u << a)) n *= m->dims[a];
    return n;
}

int sp_mesh_group_rank(const sp_mesh *m, int rank, unsigned mask)
{
    int c[SP_AXIS_COUNT], g = 0;
    sp_mesh_coords(m, rank, c);
    for (int a = 0; a < SP_AXIS_COUNT; a++)
        if (mask & (1u << a)) g = g * m->dims[a] + c[a];
    return g;
}

void sp_mesh_group_members(const sp_mesh *m, int rank, unsigned mask, int *members)
{
    int c[SP_AXIS_COUNT];
    sp_mesh_coords(m, rank, c);
    int n = sp_mesh_group_size(m, mask);
    for (int g = 0; g < n; g++) {
        int rem = g;
        for (int a = SP_AXIS_COUNT - 1; a >= 0; a--)
            if (mask & (1u << a)) {
                c[a] = rem % m->dims[a];
                rem /= m->dims[a];
            }
        members[g] = sp_mesh_rank(m, c);
    }
}
