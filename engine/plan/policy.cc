#include "opt4store/policy.h"

#include <algorithm>
#include <string>

#include "engine/plan/policy_impl.h"

namespace opt4store {

const char* PolicyName(PolicyKind kind) {
  switch (kind) {
    case PolicyKind::kOpt: return "opt";
    case PolicyKind::kOptSize: return "opt-size";
    case PolicyKind::kLru: return "lru";
    case PolicyKind::kLfu: return "lfu";
    case PolicyKind::kFifo: return "fifo";
    case PolicyKind::kRandom: return "random";
    case PolicyKind::kStatic: return "static";
    case PolicyKind::kNone: return "none";
  }
  return "unknown";
}

std::vector<PolicyKind> AllPolicies() {
  return {PolicyKind::kOpt,  PolicyKind::kOptSize, PolicyKind::kLru,    PolicyKind::kLfu,
          PolicyKind::kFifo, PolicyKind::kRandom,  PolicyKind::kStatic, PolicyKind::kNone};
}

namespace {

// "opt, opt-size, ..., static, none": every policy's name, in AllPolicies' order.
std::string PolicyNames() {
  std::string names;
  for (PolicyKind k : AllPolicies()) {
    if (!names.empty()) names += ", ";
    names += PolicyName(k);
  }
  return names;
}

}  // namespace

Status ParsePolicyKind(std::string_view name, PolicyKind* kind) {
  for (PolicyKind k : AllPolicies()) {
    if (name == PolicyName(k)) {
      *kind = k;
      return Status::OK();
    }
  }
  // "all" is a list (ParsePolicyList), not one policy a store can run.
  return Status::InvalidArgument("unknown policy '" + std::string(name) + "' (expected one of " +
                                 PolicyNames() + ")");
}

Status ParsePolicyList(std::string_view list, std::vector<PolicyKind>* kinds) {
  kinds->clear();
  if (list == "all") {
    *kinds = AllPolicies();
    return Status::OK();
  }
  size_t start = 0;
  while (start <= list.size()) {
    size_t comma = list.find(',', start);
    if (comma == std::string_view::npos) comma = list.size();
    std::string_view name = list.substr(start, comma - start);
    PolicyKind kind;
    if (!ParsePolicyKind(name, &kind).ok()) {
      return Status::InvalidArgument("unknown policy '" + std::string(name) +
                                     "' (expected a comma-separated list of " + PolicyNames() +
                                     "; or all)");
    }
    if (std::find(kinds->begin(), kinds->end(), kind) == kinds->end()) kinds->push_back(kind);
    start = comma + 1;
  }
  return Status::OK();
}

void Policy::StepBatch(const Access* accesses, size_t n, const uint64_t* costs,
                       const StepReveal* reveals, size_t num_reveals, uint8_t* hits) {
  // Reads ahead at which the policy is asked to prefetch its state.
  constexpr size_t kPrefetchAhead = 8;
  std::vector<ItemId> evicted;
  size_t next_reveal = 0;
  for (size_t i = 0; i < n; ++i) {
    if (i + kPrefetchAhead < n) Prefetch(accesses[i + kPrefetchAhead]);
    const bool hit = Step(accesses[i], costs ? costs[i] : 1, &evicted);
    if (hits) hits[i] = hit;
    evicted.clear();
    while (next_reveal < num_reveals && reveals[next_reveal].step == i) {
      const StepReveal& r = reveals[next_reveal++];
      OnReveal(Reveal{true, r.id, r.next});
    }
  }
}

Status NewPolicy(const PolicyOptions& options, std::unique_ptr<Policy>* policy) {
  if (options.num_ids == 0 || options.num_ids > kMaxDatasetSize) {
    return Status::InvalidArgument("a policy needs 1 to 2^32-1 ids, not " +
                                   std::to_string(options.num_ids));
  }
  switch (options.kind) {
    case PolicyKind::kOpt: *policy = NewOptPolicy(options); break;
    case PolicyKind::kOptSize: *policy = NewOptSizePolicy(options); break;
    case PolicyKind::kLru: *policy = NewLruPolicy(options); break;
    case PolicyKind::kLfu: *policy = NewLfuPolicy(options); break;
    case PolicyKind::kFifo: *policy = NewFifoPolicy(options); break;
    case PolicyKind::kRandom: *policy = NewRandomPolicy(options); break;
    case PolicyKind::kStatic: *policy = NewStaticPolicy(options); break;
    case PolicyKind::kNone: *policy = NewNonePolicy(options); break;
  }
  return Status::OK();
}

}  // namespace opt4store
