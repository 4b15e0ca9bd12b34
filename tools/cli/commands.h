// Copyright cxlkv authors.
//
// Subcommand registration, one function per file.
#ifndef CXLKV_TOOLS_CLI_COMMANDS_H_
#define CXLKV_TOOLS_CLI_COMMANDS_H_

#include <CLI/CLI.hpp>

namespace cxlkv::cli {

// Each registers its subcommands on `app`; the callback stores the exit
// code in *rc. Flag storage lives for the process (the CLI runs once).
void AddRegionCommands(CLI::App& app, int* rc);  // format inspect stats verify wipe gc
void AddReplayCommand(CLI::App& app, int* rc);   // replay
void AddBenchCommand(CLI::App& app, int* rc);    // bench
// status: the DRA driver's claims, budgets, pools and regions (built with
// the kube and fabric rooms: CXLKV_CLI_STATUS).
void AddStatusCommand(CLI::App& app, int* rc);

}  // namespace cxlkv::cli

#endif  // CXLKV_TOOLS_CLI_COMMANDS_H_
