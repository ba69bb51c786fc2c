#pragma once
// One job per run folder (--save): two jobs writing one folder interleave their
// checkpoints and each takes the other's staging directory away. `optimus-cc
// launch` and `optimus-cc train --save DIR` (its world rank 0) take DIR's lock
// before they write there; a second one is refused with a line naming the
// holder (what, its pid and host, since when).
//
// The lock is an flock(2) on DIR/.optimus-cc.lock, which holds the holder's
// description. The kernel releases it when the holder dies, so a lock file left
// by a killed process does not block (it is taken over); a clean exit removes
// the file. On a file system without flock (some NFS set-ups) the lock is not
// taken and the job goes on as before.
//
// The supervisor's own job must use the folder the supervisor locked: the
// supervisor passes its token (--run-lock-token, hidden) to the train command,
// which then does not lock but checks that the lock's holder has that token.
#include <string>

namespace occ {

class RunLock {
 public:
  RunLock() = default;  // holds nothing
  RunLock(RunLock&& other) noexcept;
  RunLock& operator=(RunLock&& other) noexcept;
  ~RunLock();

  // Takes DIR's lock (DIR must exist), recording `what` ("optimus-cc launch",
  // "optimus-cc train"); throws occ::Error naming the holder when another
  // process holds it. `token`: the job of the supervisor that holds it with
  // this token may use DIR without the lock (nothing is taken then).
  static RunLock acquire(const std::string& dir, const std::string& what, const std::string& token = "");

  bool held() const { return fd_ >= 0; }
  // Names this holder, for its job's --run-lock-token.
  const std::string& token() const { return token_; }
  static const char* file_name() { return ".optimus-cc.lock"; }

 private:
  void release();

  int fd_ = -1;
  std::string path_, token_;
};

}  // namespace occ
