// Copyright cxlkv authors.
//
// Where a test finds the programs and files it runs, at run time.
//
// The tests that start real binaries (the `cxlkv` CLI, cxlkv-fabricd,
// cxlkv-hostd) used to get their absolute paths through -D macros. A macro
// holding an absolute path makes the object file differ in every clone, so
// ccache could never answer it for a clean clone (scripts/lib/stage.sh says
// how the rest of the build hits). Every executable of a build lands in one
// directory (CMAKE_RUNTIME_OUTPUT_DIRECTORY, <build>/bin), so a test finds
// its siblings next to itself, and the source tree through
// CXLKV_SOURCE_DIR, which CTest sets (cxlkv_test(... ENV_SOURCE_DIR)).
//
// Header-only, test-only. Thread-safe once first called (function-local
// statics); the answers are paths, not checked for existence: a missing
// file is reported by whatever opens it, with the path.
#ifndef CXLKV_TEST_TESTUTIL_BUILT_BINARY_H_
#define CXLKV_TEST_TESTUTIL_BUILT_BINARY_H_

#include <unistd.h>

#include <cstdlib>
#include <string>

namespace cxlkv::testutil {

// The directory of the running test binary (/proc/self/exe, resolved), or
// "." when it cannot be read.
inline const std::string& SelfDir() {
  static const std::string dir = [] {
    char buf[4096];
    const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
    if (n <= 0) return std::string(".");
    std::string p(buf, static_cast<size_t>(n));
    const size_t slash = p.rfind('/');
    return slash == std::string::npos ? std::string(".") : p.substr(0, slash);
  }();
  return dir;
}

// The executable `name` of the same build: <build>/bin/<name>.
inline std::string BuiltBinary(const std::string& name) { return SelfDir() + "/" + name; }

// The source tree's root: $CXLKV_SOURCE_DIR (set by CTest), else two levels
// above <build>/bin (a build directory at the root of the tree, as
// scripts/test.sh makes them).
inline const std::string& SourceDir() {
  static const std::string dir = [] {
    const char* e = std::getenv("CXLKV_SOURCE_DIR");
    if (e != nullptr && *e != '\0') return std::string(e);
    return SelfDir() + "/../..";
  }();
  return dir;
}

// A file of the source tree by its path from the root, e.g.
// SourceFile("data/traces/mooncake-conversation-trace.jsonl").
inline std::string SourceFile(const std::string& rel) { return SourceDir() + "/" + rel; }

}  // namespace cxlkv::testutil

#endif  // CXLKV_TEST_TESTUTIL_BUILT_BINARY_H_
