// Copyright cxlkv authors.
//
// What the cxlkv daemons' thin mains share: the --listen address and a clean
// stop on SIGINT/SIGTERM.
#ifndef CXLKV_BASE_DAEMON_H_
#define CXLKV_BASE_DAEMON_H_

#include <signal.h>

#include <atomic>
#include <functional>
#include <string>
#include <thread>

#include "cxlkv/status.h"

namespace cxlkv::base {

// Splits "ADDR:PORT" at its last colon; PORT is 0..65535 (0: any free port).
// InvalidArgument "--listen <text>: expected ADDR:PORT".
Status ParseListenAddress(const std::string& text, std::string* host, int* port);

// Blocks SIGINT and SIGTERM in the constructing thread, so every thread
// started afterwards inherits the mask and only Watch's thread sees them.
// REQUIRES: constructed before the process starts any other thread.
// Thread-safety: one owner; the callback runs on the watcher thread.
class StopSignals {
 public:
  StopSignals();
  ~StopSignals();  // Join()
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // Starts the watcher: on the first SIGINT or SIGTERM it calls on_stop with
  // the signal number. Call at most once.
  void Watch(std::function<void(int signal)> on_stop);

  // Ends the watcher without calling on_stop if no signal came, and joins
  // it. Call it before what on_stop touches is destroyed.
  void Join();

 private:
  sigset_t set_;
  std::atomic<bool> joining_{false};
  std::thread watcher_;
};

}  // namespace cxlkv::base

#endif  // CXLKV_BASE_DAEMON_H_
