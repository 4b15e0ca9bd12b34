// Copyright cxlkv authors.
#include "commands.h"
namespace cxlkv::cli {
void AddBenchCommand(CLI::App& app, int* rc) {}
}
