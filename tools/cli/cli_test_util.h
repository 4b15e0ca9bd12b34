// Copyright cxlkv authors.
//
// What the `cxlkv` CLI tests share (cli_test, cli_lifecycle_test,
// cli_coherence_test): the binary and the trace, found at run time
// (test/testutil/built_binary.h says why not through -D), and a shell
// runner that keeps the exit status, stdout and stderr of a command.
//
// Test-only. Sh() is not thread-safe within one process (its stderr file
// is named by the pid and `tag`): the tests call it from one thread.
#ifndef CXLKV_TOOLS_CLI_CLI_TEST_UTIL_H_
#define CXLKV_TOOLS_CLI_CLI_TEST_UTIL_H_

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>

#include "built_binary.h"

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

}  // namespace cxlkv::clitest

#endif  // CXLKV_TOOLS_CLI_CLI_TEST_UTIL_H_
