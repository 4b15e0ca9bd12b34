// Copyright cxlkv authors.
#include "cxlkv/base/daemon.h"

#include <dirent.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
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

void ListenSocketOptions(int fd) {
  int yes = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
}

namespace {

// The inode of the socket listening on `port`, from /proc/net/tcp and tcp6
// ("sl local_address rem_address st ... inode": local "HEXADDR:HEXPORT",
// state 0A = LISTEN); 0 when none.
unsigned long ListeningInode(int port) {
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);  // the header
    while (std::getline(in, line)) {
      std::istringstream f(line);
      std::string sl, local, remote, st, queues, timer, retr, uid, timeout;
      unsigned long inode = 0;
      if (!(f >> sl >> local >> remote >> st >> queues >> timer >> retr >> uid >> timeout >>
            inode)) {
        continue;
      }
      const size_t colon = local.rfind(':');
      if (st != "0A" || colon == std::string::npos) continue;
      if (std::strtol(local.c_str() + colon + 1, nullptr, 16) == port) return inode;
    }
  }
  return 0;
}

}  // namespace

std::string PortHolder(int port) {
  const unsigned long inode = ListeningInode(port);
  if (inode == 0) return "";
  const std::string want = "socket:[" + std::to_string(inode) + "]";
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) return "";
  std::string found;
  while (dirent* p = ::readdir(proc)) {
    if (p->d_name[0] < '0' || p->d_name[0] > '9') continue;
    const std::string fds = std::string("/proc/") + p->d_name + "/fd";
    DIR* d = ::opendir(fds.c_str());  // another user's: not readable, skipped
    if (d == nullptr) continue;
    while (dirent* e = ::readdir(d)) {
      char target[64];
      const ssize_t n = ::readlink((fds + "/" + e->d_name).c_str(), target, sizeof(target) - 1);
      if (n <= 0 || want.compare(0, std::string::npos, target, size_t(n)) != 0) continue;
      std::string name;
      std::getline(std::ifstream(std::string("/proc/") + p->d_name + "/comm"), name);
      found = std::string("pid ") + p->d_name + (name.empty() ? "" : " (" + name + ")");
      break;
    }
    ::closedir(d);
    if (!found.empty()) break;
  }
  ::closedir(proc);
  return found;
}

Status ListenError(const std::string& flag, const std::string& host, int port, int err) {
  const std::string addr = host + ":" + std::to_string(port);
  const std::string holder = port > 0 ? PortHolder(port) : "";
  if (err == EADDRINUSE || !holder.empty()) {
    return Status::IOError(
        "listen " + addr + ": address already in use: port " + std::to_string(port) +
        " is held by " +
        (holder.empty() ? "another process (not visible from here; `ss -ltnp` may name it)"
                        : holder) +
        "; stop it, or give " + flag + " another port (port 0 takes a free one)");
  }
  return Status::IOError("listen " + addr + ": " +
                         (err != 0 ? std::strerror(err) : "the address could not be bound") +
                         "; check " + flag + " (ADDR:PORT, ADDR an address of this host)");
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
