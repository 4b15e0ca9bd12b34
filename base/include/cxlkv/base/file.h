// Copyright cxlkv authors.
//
// Files every daemon keeps: whole-file reads, durable whole-file replacement
// (write a temp file beside the target, fsync it, rename it over the target,
// fsync the directory: a crash at any point leaves the old or the new
// contents, never a torn file), and versioned JSON state files on top.
//
// Thread-safety: free functions; concurrent writers of one path must be
// serialized by the caller (they share the temp file name).
#ifndef CXLKV_BASE_FILE_H_
#define CXLKV_BASE_FILE_H_

#include <nlohmann/json.hpp>
#include <string>

#include "cxlkv/status.h"

namespace cxlkv::base {

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

// A versioned state file is one JSON object, pretty-printed with two-space
// indents, whose "version" field says which shape the other fields have.

// Writes `fields` (REQUIRES: an object without "version") plus "version":
// `version` atomically to `path`. IOError as WriteFileAtomic.
Status SaveStateFile(const std::string& path, int version, nlohmann::json fields);

// Parses state text. Corruption "malformed JSON: <cause>" or "state:
// unknown version" (not an object, or another version than `version`).
Status ParseState(const std::string& text, int version, nlohmann::json* out);

}  // namespace cxlkv::base

#endif  // CXLKV_BASE_FILE_H_
