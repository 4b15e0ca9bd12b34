// Copyright cxlkv authors.
#include "cxlkv/base/daemon.h"

#include <pthread.h>

#include <utility>

namespace cxlkv::base {

Status ParseListenAddress(const std::string& text, std::string* host, int* port) {
  auto colon = text.rfind(':');
  int p = -1;
  if (colon != std::string::npos) {
    try {
      size_t used = 0;
      std::string digits = text.substr(colon + 1);
      p = std::stoi(digits, &used);
      if (used != digits.size()) p = -1;
    } catch (...) {
      p = -1;
    }
  }
  if (colon == std::string::npos || p < 0 || p > 65535) {
    return Status::InvalidArgument("--listen " + text + ": expected ADDR:PORT");
  }
  *host = text.substr(0, colon);
  *port = p;
  return Status::OK();
}

StopSignals::StopSignals() {
  sigemptyset(&set_);
  sigaddset(&set_, SIGINT);
  sigaddset(&set_, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set_, nullptr);
}

StopSignals::~StopSignals() { Join(); }

void StopSignals::Join() {
  if (!watcher_.joinable()) return;
  joining_ = true;
  // The watcher may still be in sigwait: a SIGTERM aimed at it ends the wait
  // (it is blocked everywhere, so nothing else sees it).
  pthread_kill(watcher_.native_handle(), SIGTERM);
  watcher_.join();
}

void StopSignals::Watch(std::function<void(int)> on_stop) {
  watcher_ = std::thread([this, on_stop = std::move(on_stop)] {
    int sig = 0;
    sigwait(&set_, &sig);
    if (!joining_) on_stop(sig);
  });
}

bool ServeGate::Enter() {
  MutexLock l(&mu_);
  if (stop_requested_) return false;
  entered_ = true;
  return true;
}

void ServeGate::Exit() {
  MutexLock l(&mu_);
  exited_ = true;
  cv_.SignalAll();
}

void ServeGate::Stop(const std::function<bool()>& running, const std::function<void()>& stop) {
  MutexLock l(&mu_);
  stop_requested_ = true;
  // The loop marks itself running a moment after Enter; until then its own
  // stop call would be dropped, so poll for it (1 ms: the window is short).
  while (entered_ && !exited_) {
    if (!stopped_ && running()) {
      stop();
      stopped_ = true;
    }
    cv_.WaitFor(&mu_, std::chrono::milliseconds(1));
  }
}

}  // namespace cxlkv::base
