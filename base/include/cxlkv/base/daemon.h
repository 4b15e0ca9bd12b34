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

#include "cxlkv/base/mutex.h"
#include "cxlkv/base/thread_annotations.h"
#include "cxlkv/status.h"

namespace cxlkv::base {

// Splits "ADDR:PORT" at its last colon; PORT is 0..65535 (0: any free port).
// InvalidArgument "--listen <text>: expected ADDR:PORT".
Status ParseListenAddress(const std::string& text, std::string* host, int* port);

// The socket options of every cxlkv HTTP listener (give it to cpp-httplib's
// Server::set_socket_options before binding). SO_REUSEADDR only: a restarted
// daemon binds over its predecessor's TIME_WAIT connections, but a port that
// another process listens on stays refused. cpp-httplib's default (0.11.4,
// Debian 12) sets SO_REUSEPORT instead, with which a second daemon on a taken
// port bound it too, printed "listening", and the kernel spread connections
// over the two.
void ListenSocketOptions(int fd);

// The error for a listen on host:port that failed with errno `err`: says
// "address already in use" when it is (or when a listener holds the port),
// names the process holding the port where /proc shows it (same user, same
// network namespace), and how to go on. `flag` names the option that chose
// the address ("--listen").
Status ListenError(const std::string& flag, const std::string& host, int port, int err);

// The process listening on TCP `port` (IPv4 or IPv6, any address), as
// "pid N (NAME)", or "" when none is visible to this process.
std::string PortHolder(int port);

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

// Ends a blocking serve call (an HTTP server's accept loop) from another
// thread whenever the stop comes, including before the loop has started.
// Why: cpp-httplib's Server::stop() (0.11.4, Debian 12) acts only once
// listen_after_bind() has marked the server running; a stop that lands
// between Bind and that moment is dropped and the loop then serves forever
// (cxlkv-fabricd hung on a SIGTERM about 20 ms after it printed "listening").
// With the gate, a Stop before Enter makes Enter return false (do not
// serve), and a Stop during the start waits until the server reports running
// and stops it then, once.
// Thread-safety: Enter and Exit from the serving thread, Stop from any
// thread (several calls are fine; each returns once the serve has ended).
class ServeGate {
 public:
  // The serving thread, right before it blocks: false if Stop came first.
  bool Enter();
  // The serving thread, once the serve call returned (or was skipped).
  void Exit();
  // Ends the serve: `running` reports whether the server's loop is up,
  // `stop` is the server's own stop call (called at most once, and only
  // while `running` is true). Returns at once when no serve began, else once
  // Exit was called. REQUIRES: the serving thread calls Exit after Enter.
  void Stop(const std::function<bool()>& running, const std::function<void()>& stop);

 private:
  Mutex mu_;
  CondVar cv_;
  bool stop_requested_ CXLKV_GUARDED_BY(mu_) = false;
  bool entered_ CXLKV_GUARDED_BY(mu_) = false;
  bool exited_ CXLKV_GUARDED_BY(mu_) = false;
  bool stopped_ CXLKV_GUARDED_BY(mu_) = false;  // `stop` was called
};

}  // namespace cxlkv::base

#endif  // CXLKV_BASE_DAEMON_H_
