/* cmd_calibrate_local.c: shardplan calibrate --backend B: measures this
 * machine's chips and writes a hardware profile. */
#include "cli.h"

int cli_calibrate_local(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    cli_errorf("calibrate --backend: measuring this machine is not implemented yet; "
               "calibrate --fit CSV --hw H fits a profile to measurements");
    return CLI_EXIT_USAGE;
}
