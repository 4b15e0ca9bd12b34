// Copyright cxlkv authors.
//
// `cxlkv`: administer a shared KV region, replay a trace against it,
// benchmark it. Human-readable output by default, --json for machines.
#include <CLI/CLI.hpp>

#include "commands.h"
#include "common.h"

int main(int argc, char** argv) {
  CLI::App app{"cxlkv: a KV-cache tier in shared memory (CXL or /dev/shm)"};
  app.require_subcommand(1);
  int rc = cxlkv::cli::kExitOk;
  cxlkv::cli::AddRegionCommands(app, &rc);
  cxlkv::cli::AddReplayCommand(app, &rc);
  cxlkv::cli::AddBenchCommand(app, &rc);
#ifdef CXLKV_CLI_STATUS
  cxlkv::cli::AddStatusCommand(app, &rc);
#endif
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : cxlkv::cli::kExitUsage;
  }
  return rc;
}
