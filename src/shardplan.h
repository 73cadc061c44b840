/*
 * shardplan.h: every public header of libshardplan, for clients that want
 * the whole library:
 *
 *   #include <shardplan.h>            (or one module: #include <shardplan/sp_exec.h>)
 *   cc client.c $(pkg-config --cflags --libs shardplan)
 *
 * Each header documents its module; design.md, formats.md and planner.md
 * are installed under $(datadir)/doc/shardplan.
 */
#ifndef SHARDPLAN_H
#define SHARDPLAN_H
#include <shardplan/sp_common.h>
#include <shardplan/sp_model.h>
#include <shardplan/sp_hw.h>
#include <shardplan/sp_mesh.h>
#include <shardplan/sp_layout.h>
#include <shardplan/sp_lower.h>
#include <shardplan/sp_cost.h>
#include <shardplan/sp_plan.h>
#include <shardplan/sp_autoconfig.h>
#include <shardplan/sp_fleet.h>
#include <shardplan/sp_sweep.h>
#include <shardplan/sp_comm.h>
#include <shardplan/sp_exec.h>
#include <shardplan/sp_fit.h>
#include <shardplan/sp_kern.h>
#include <shardplan/sp_measure.h>
#include <shardplan/sp_ref.h>
#include <shardplan/sp_trace.h>
#include <shardplan/sp_weights.h>
#include <shardplan/sp_validate.h>
#include <shardplan/sp_calib.h>
#include <shardplan/sp_version.h>
#endif
