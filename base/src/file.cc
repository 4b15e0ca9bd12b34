// Copyright cxlkv authors.
#include "cxlkv/base/file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "cxlkv/base/json.h"

namespace cxlkv::base {

std::string ErrnoText() { return std::strerror(errno); }

namespace {

std::string DirName(const std::string& path) {
  auto pos = path.rfind('/');
  if (pos == std::string::npos) return ".";
  if (pos == 0) return "/";
  return path.substr(0, pos);
}

Status WriteAll(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::IOError(ErrnoText());
    }
    done += static_cast<size_t>(n);
  }
  return Status::OK();
}

}  // namespace

Status WriteFileAtomic(const std::string& path, const std::string& data) {
  const std::string ctx = "write " + path;
  const std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Status::IOError(ErrnoText()).WithContext(ctx);
  Status s = WriteAll(fd, data);
  // fsync before rename: otherwise the rename can reach disk before the data.
  if (s.ok() && ::fsync(fd) != 0) s = Status::IOError(ErrnoText());
  if (::close(fd) != 0 && s.ok()) s = Status::IOError(ErrnoText());
  if (s.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) s = Status::IOError(ErrnoText());
  if (!s.ok()) {
    ::unlink(tmp.c_str());
    return s.WithContext(ctx);
  }
  // fsync the directory so the rename itself is durable.
  int dfd = ::open(DirName(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return Status::OK();
}

Status ReadFile(const std::string& path, std::string* data) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return Status::NotFound("read " + path + ": " + ErrnoText());
    return Status::IOError("read " + path + ": " + ErrnoText());
  }
  data->clear();
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0) {
      if (errno == EINTR) continue;
      std::string err = ErrnoText();
      ::close(fd);
      return Status::IOError("read " + path + ": " + err);
    }
    if (n == 0) break;
    data->append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return Status::OK();
}

Status MakeDirs(const std::string& dir) {
  if (dir.empty()) return Status::InvalidArgument("create directory: empty path");
  std::string cur;
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = dir.find('/', pos + 1);
    cur = dir.substr(0, pos);
    if (cur.empty()) continue;
    if (::mkdir(cur.c_str(), 0755) != 0 && errno != EEXIST) {
      return Status::IOError("create directory " + cur + ": " + ErrnoText());
    }
  }
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return Status::IOError("create directory " + dir + ": not a directory");
  }
  return Status::OK();
}

Status RemoveFile(const std::string& path) {
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    return Status::IOError("remove " + path + ": " + ErrnoText());
  }
  return Status::OK();
}

Status SaveStateFile(const std::string& path, int version, nlohmann::json fields) {
  fields["version"] = version;
  return WriteFileAtomic(path, fields.dump(2));
}

Status ParseState(const std::string& text, int version, nlohmann::json* out) {
  nlohmann::json j;
  Status s = ParseJson(text, &j);
  if (!s.ok()) return Status::Corruption(s.message());
  if (!j.is_object() || j.value("version", 0) != version) {
    return Status::Corruption("state: unknown version");
  }
  *out = std::move(j);
  return Status::OK();
}

}  // namespace cxlkv::base
