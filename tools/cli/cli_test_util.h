// Copyright cxlkv authors.
//
// What the `cxlkv` CLI tests share (cli_test, cli_lifecycle_test,
// cli_coherence_test): the binary and the trace, found at run time
// (test/testutil/built_binary.h says why not through -D), a shell runner
// that keeps the exit status, stdout and stderr of a command, the `cxlkv`
// runner and JSON reader built on it, and per-process region paths.
//
// Test-only. Sh() is not thread-safe within one process (its stderr file
// is named by the pid and `tag`): the tests call it from one thread.
#ifndef CXLKV_TOOLS_CLI_CLI_TEST_UTIL_H_
#define CXLKV_TOOLS_CLI_CLI_TEST_UTIL_H_

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "built_binary.h"
#include "cxlkv/region.h"

namespace cxlkv::clitest {

// The `cxlkv` binary of this build.
inline const std::string& Bin() {
  static const std::string bin = testutil::BuiltBinary("cxlkv");
  return bin;
}

// The Mooncake conversation trace of the source tree.
inline const std::string& Trace() {
  static const std::string trace =
      testutil::SourceFile("data/traces/mooncake-conversation-trace.jsonl");
  return trace;
}

struct Result {
  int rc = -1;      // the exit status; -1 when the command did not exit (a signal)
  std::string out;  // stdout
  std::string err;  // stderr
};

// Runs `cmd` through /bin/sh (popen). stderr goes through the file
// /tmp/cxlkv-<tag>-<pid>.err, removed afterwards.
inline Result Sh(const std::string& cmd, const std::string& tag) {
  const std::string err_path = "/tmp/cxlkv-" + tag + "-" + std::to_string(::getpid()) + ".err";
  Result r;
  FILE* p = ::popen((cmd + " 2>" + err_path).c_str(), "r");
  if (p == nullptr) {
    r.err = "popen failed: " + cmd;
    return r;
  }
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int st = ::pclose(p);
  r.rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  std::ifstream err(err_path);
  r.err.assign((std::istreambuf_iterator<char>(err)), std::istreambuf_iterator<char>());
  ::unlink(err_path.c_str());
  return r;
}

// `cxlkv <args>`, with `env` (VAR=value ...) before it. out is stdout, or
// stderr when stdout is empty: the tests check the error text then.
inline Result Cxlkv(const std::string& args, const std::string& env = "") {
  Result r = Sh(env + " " + Bin() + " " + args, "cli");
  if (r.out.empty()) r.out = r.err;
  return r;
}

// `r.out` parsed; a test failure naming both streams (and an empty object)
// when it is not JSON.
inline nlohmann::json Json(const Result& r) {
  try {
    return nlohmann::json::parse(r.out);
  } catch (...) {
    ADD_FAILURE() << "not JSON: " << r.out << r.err;
    return nlohmann::json::object();
  }
}

// A region path of this test process: /dev/shm/cxlkv-test/cli-<tag>-<pid>
// (the pid keeps test binaries that ctest runs at once apart).
inline std::string Region(const std::string& tag) {
  return "/dev/shm/cxlkv-test/cli-" + tag + "-" + std::to_string(::getpid());
}

// Attaches to a region `cxlkv format` made (no prefault, no create) and
// registers the tests' namespace "m" in it: how the tests put blocks in a
// region the command then looks at. Fails the test on any error; callers
// wrap it in ASSERT_NO_FATAL_FAILURE.
inline void AttachWithNamespace(const std::string& path, std::unique_ptr<cxlkv::Region>* region,
                                cxlkv::NamespaceId* ns) {
  cxlkv::RegionOptions o;
  o.create_if_missing = false;
  o.prefault = cxlkv::Prefault::kNone;
  ASSERT_TRUE(cxlkv::Region::Open(path, o, region).ok());
  ASSERT_TRUE((*region)->RegisterNamespace({"m", "bf16", "NHD", 0, 0}, ns).ok());
}

}  // namespace cxlkv::clitest

#endif  // CXLKV_TOOLS_CLI_CLI_TEST_UTIL_H_
