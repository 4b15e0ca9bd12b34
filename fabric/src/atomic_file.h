// Copyright cxlkv authors.
//
// Durable whole-file replacement: write a temp file beside the target, fsync
// it, rename it over the target, fsync the directory. A crash at any point
// leaves either the old or the new contents, never a torn file.
#ifndef CXLKV_FABRIC_ATOMIC_FILE_H_
#define CXLKV_FABRIC_ATOMIC_FILE_H_

#include <string>

#include "cxlkv/status.h"

namespace cxlkv::fabric::internal {

// Replaces `path` with `data`. IOError: "write <path>: <strerror>".
Status WriteFileAtomic(const std::string& path, const std::string& data);

// Reads all of `path` into *data. NotFound: file absent; IOError otherwise.
Status ReadFile(const std::string& path, std::string* data);

// Creates `dir` and its parents (mode 0755). IOError on failure.
Status MakeDirs(const std::string& dir);

// Removes `path`; a missing file is OK. IOError otherwise.
Status RemoveFile(const std::string& path);

// "<strerror(errno)>" for the calling thread's errno.
std::string ErrnoText();

}  // namespace cxlkv::fabric::internal

#endif  // CXLKV_FABRIC_ATOMIC_FILE_H_
