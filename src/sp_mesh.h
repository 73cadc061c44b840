/*
 * sp_mesh.h: the chips of one job arranged as named axes.
 *
 * Axes, slowest to fastest: stage (pipeline) × replica (data) × x × y × z
 * (tensor mesh).  A chip's global rank is the mixed-radix number of its
 * coordinates in that order, z fastest:
 *     rank = (((stage * R + replica) * X + x) * Y + y) * Z + z
 * A group is a set of axes (a bit mask): the chips that share every other
 * coordinate.  A chip's rank inside a group is the mixed-radix number of its
 * coordinates on the group's axes, in the same order (so over {x,y,z} it is
 * x-major).  Shards of a dimension split over a group are numbered by that
 * group rank: chunk g of a dimension sharded over {y,z} lives on the chips
 * with y*Z + z == g.
 */
#ifndef SP_MESH_H
#define SP_MESH_H
#include "sp_common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum sp_axis {
    SP_AXIS_STAGE = 0, SP_AXIS_REPLICA = 1, SP_AXIS_X = 2, SP_AXIS_Y = 3, SP_AXIS_Z = 4, SP_AXIS_COUNT
} sp_axis;

/* Group masks. */
#define SP_AXES_NONE 0u
#define SP_AXES_STAGE (1u << SP_AXIS_STAGE)
#define SP_AXES_REPLICA (1u << SP_AXIS_REPLICA)
#define SP_AXES_X (1u << SP_AXIS_X)
#define SP_AXES_Y (1u << SP_AXIS_Y)
#define SP_AXES_Z (1u << SP_AXIS_Z)
#define SP_AXES_XYZ (SP_AXES_X | SP_AXES_Y | SP_AXES_Z)
#define SP_AXES_ALL (SP_AXES_STAGE | SP_AXES_REPLICA | SP_AXES_XYZ)

typedef struct sp_mesh {
    int dims[SP_AXIS_COUNT];   /* each >= 1 */
} sp_mesh;

const char *sp_axis_name(sp_axis a);            /* "stage", "replica", "x", "y", "z" */
/* Writes a mask as axis letters, e.g. "yz", "xyz", "-" for none. */
const char *sp_axes_str(unsigned mask, char *buf, int size);

int sp_mesh_size(const sp_mesh *m);                         /* product of dims */
int sp_mesh_tp(const sp_mesh *m);                           /* X*Y*Z */
void sp_mesh_coords(const sp_mesh *m, int rank, int coords[SP_AXIS_COUNT]);
int sp_mesh_rank(const sp_mesh *m, const int coords[SP_AXIS_COUNT]);
int sp_mesh_group_size(const sp_mesh *m, unsigned mask);
int sp_mesh_group_rank(const sp_mesh *m, int rank, unsigned mask);
/* Global ranks of the group containing `rank`, ordered by group rank.
 * members must hold sp_mesh_group_size(m, mask) ints. */
void sp_mesh_group_members(const sp_mesh *m, int rank, unsigned mask, int *members);

#ifdef __cplusplus
}
#endif
#endif
