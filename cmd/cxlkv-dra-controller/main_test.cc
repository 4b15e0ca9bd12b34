// Copyright cxlkv authors.
//
// cxlkv-dra-controller's start-up errors through the real binary (no
// cluster needed): each says what is wrong and how to go on, and comes
// before any start-up work that would hide it.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>

#include "built_binary.h"

namespace {

struct Result {
  int rc = -1;      // exit status; -1 when killed by a signal
  std::string err;  // stderr
};

// Runs the controller of this build with `args` (and `env`, VAR=value ...,
// before it), stdout discarded.
Result Controller(const std::string& args, const std::string& env = "") {
  const std::string err_path = "/tmp/cxlkv-ctl-main-" + std::to_string(::getpid()) + ".err";
  const std::string bin = cxlkv::testutil::BuiltBinary("cxlkv-dra-controller");
  const std::string cmd =
      env + " " + bin + " " + args + " >/dev/null 2>" + err_path + " </dev/null";
  const int st = std::system(cmd.c_str());
  Result r;
  r.rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  std::ifstream f(err_path);
  r.err.assign((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  ::unlink(err_path.c_str());
  return r;
}

// A kubeconfig path that names nothing (the pid keeps runs apart).
std::string MissingKubeconfig() {
  return "/tmp/cxlkv-test-no-kubeconfig-" + std::to_string(::getpid()) + "/config";
}

TEST(ControllerMainTest, AMissingKubeconfigIsSaidToNotExistWithThePathAndTheWayOn) {
  const std::string path = MissingKubeconfig();
  const Result r = Controller("--identity t --fabric http://127.0.0.1:9 --kubeconfig " + path);
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_NE(r.err.find("load kubeconfig " + path + ": the file does not exist"), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("--kubeconfig or $KUBECONFIG"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("bad file"), std::string::npos) << r.err;
  // A directory is named as one.
  const Result d = Controller("--identity t --fabric http://127.0.0.1:9 --kubeconfig /tmp");
  EXPECT_EQ(d.rc, 1) << d.err;
  EXPECT_NE(d.err.find("load kubeconfig /tmp: a directory, not a file"), std::string::npos)
      << d.err;
}

// --flow and --capacity-mode are checked with the other flags: a bad value
// is refused (exit 2) naming the values it takes, before the kubeconfig is
// read (a missing one here would otherwise be the error shown).
TEST(ControllerMainTest, AnUnknownModeIsRefusedFirstNamingTheValuesItTakes) {
  const std::string base =
      "--identity t --fabric http://127.0.0.1:9 --kubeconfig " + MissingKubeconfig();
  Result r = Controller(base + " --flow papers");
  EXPECT_EQ(r.rc, 2) << r.err;
  EXPECT_NE(r.err.find("--flow \"papers\""), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("binding-conditions, prepare-wait (alias paper) or auto"), std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find("kubeconfig"), std::string::npos) << r.err;
  r = Controller(base, "CXLKV_DRA_FLOW=bc");  // the environment variable, checked alike
  EXPECT_EQ(r.rc, 2) << r.err;
  EXPECT_NE(r.err.find("--flow \"bc\" ($CXLKV_DRA_FLOW)"), std::string::npos) << r.err;
  r = Controller(base + " --capacity-mode annotations");
  EXPECT_EQ(r.rc, 2) << r.err;
  EXPECT_NE(r.err.find("--capacity-mode \"annotations\""), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("consumable, fixed-devices (alias annotation) or auto"), std::string::npos)
      << r.err;
  // Accepted names (an alias too) pass the check: the kubeconfig is next.
  r = Controller(base + " --flow paper --capacity-mode fixed-devices");
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_NE(r.err.find("load kubeconfig"), std::string::npos) << r.err;
}

}  // namespace
