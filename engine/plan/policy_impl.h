// Internal: constructors of the concrete policies, for NewPolicy().
#ifndef OPT4STORE_ENGINE_POLICY_IMPL_H_
#define OPT4STORE_ENGINE_POLICY_IMPL_H_

#include <memory>

#include "opt4store/policy.h"

namespace opt4store {

std::unique_ptr<Policy> NewOptPolicy(const PolicyOptions& options);
std::unique_ptr<Policy> NewOptSizePolicy(const PolicyOptions& options);
std::unique_ptr<Policy> NewLfuPolicy(const PolicyOptions& options);
std::unique_ptr<Policy> NewLruPolicy(const PolicyOptions& options);
std::unique_ptr<Policy> NewFifoPolicy(const PolicyOptions& options);
std::unique_ptr<Policy> NewRandomPolicy(const PolicyOptions& options);
std::unique_ptr<Policy> NewStaticPolicy(const PolicyOptions& options);
std::unique_ptr<Policy> NewNonePolicy(const PolicyOptions& options);

// True if an item whose next read is `victim` should leave before one whose
// next read is `incoming`: strictly later, with kNever > kFar > any exact
// position. kFar against kFar is unknown, so false (and *ambiguous is set).
inline bool ReadLater(uint64_t victim, uint64_t incoming, bool* ambiguous) {
  if (victim == kFar && incoming == kFar) {
    *ambiguous = true;
    return false;
  }
  return victim > incoming;
}

}  // namespace opt4store

#endif  // OPT4STORE_ENGINE_POLICY_IMPL_H_
