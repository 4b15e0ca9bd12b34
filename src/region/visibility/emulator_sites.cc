// Copyright cxlkv authors.
//
// emulator_sites FILE: prints the Flush/Invalidate call sites that the
// non-coherence emulator recorded in a sites file (emulator.h), one per line:
// `flush|invalidate 0xOFFSET CALLS OBJECT`. Exit 1 with a message on error.
// Used by test/coherence/mutants.sh.
#include <cstdio>

#include "emulator.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: emulator_sites SITES_FILE\n");
    return 2;
  }
  std::vector<cxlkv::internal::EmulatorSite> sites;
  const cxlkv::Status s = cxlkv::internal::ReadEmulatorSites(argv[1], &sites);
  if (!s.ok()) {
    std::fprintf(stderr, "emulator_sites: %s\n", s.ToString().c_str());
    return 1;
  }
  for (const auto& e : sites)
    std::printf("%s 0x%llx %llu %s\n", e.invalidate ? "invalidate" : "flush",
                static_cast<unsigned long long>(e.offset), static_cast<unsigned long long>(e.calls),
                e.object.c_str());
  return 0;
}
