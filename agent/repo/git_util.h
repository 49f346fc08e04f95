// Small libgit2 helpers shared by git_repo.cc and mirror.cc. Include only in
// .cc files that already include <git2.h>.
#pragma once

#include <git2.h>

#include <string>

namespace trainq::git {

// Initialises libgit2 once per process (shut down at exit).
inline void EnsureInit() {
  struct Init {
    Init() { git_libgit2_init(); }
    ~Init() { git_libgit2_shutdown(); }
  };
  static Init init;
}

// The message of the last libgit2 error on this thread.
inline std::string LastError() {
  const git_error* e = git_error_last();
  return e && e->message ? e->message : "unknown libgit2 error";
}

// A commit id as 40 hex digits.
inline std::string OidHex(const git_oid* oid) {
  char buf[GIT_OID_HEXSZ + 1];
  git_oid_tostr(buf, sizeof buf, oid);
  return buf;
}

// Owns one libgit2 object and frees it with `Free`.
template <typename T, void (*Free)(T*)>
struct Owned {
  T* p = nullptr;
  Owned() = default;
  Owned(const Owned&) = delete;
  Owned& operator=(const Owned&) = delete;
  ~Owned() {
    if (p) Free(p);
  }
};

}  // namespace trainq::git
