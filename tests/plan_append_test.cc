// Open explicit plans (PlanSpec::total_epochs): a plan given a few epochs at
// a time, as PlannedSampler hands it over.
//   - the source: its shape is the whole run, it knows only what was given,
//     and Append takes whole epochs in order, checked, or nothing at all;
//   - NextUseStream over it: with the epoch after the current one always
//     appended, every next read is exact (equal to brute force over the
//     whole sequence), so OPT's hits equal those with the whole plan;
//     appended late, the unknown next reads are kFar and each is revealed
//     exactly once when its epoch comes.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include <catch2/catch.hpp>

#include "opt4store/next_use.h"
#include "opt4store/plan.h"
#include "opt4store/policy.h"

namespace opt4store {
namespace {

// Shuffled epochs of n ids (the generated shuffle), as one sequence.
std::vector<ItemId> ShuffleSequence(uint64_t n, uint64_t epochs, uint64_t seed) {
  PlanSpec spec;
  spec.kind = SamplerKind::kShuffle;
  spec.dataset_size = n;
  spec.epochs = epochs;
  spec.seed = seed;
  std::vector<ItemId> all, epoch;
  for (uint64_t e = 0; e < epochs; ++e) {
    GenerateEpoch(spec, e, &epoch);
    all.insert(all.end(), epoch.begin(), epoch.end());
  }
  return all;
}

std::vector<ItemId> Epochs(const std::vector<ItemId>& all, uint64_t length, uint64_t first,
                           uint64_t count) {
  return std::vector<ItemId>(all.begin() + static_cast<ptrdiff_t>(first * length),
                             all.begin() + static_cast<ptrdiff_t>((first + count) * length));
}

PlanSpec OpenPlan(const std::vector<ItemId>& ids, uint64_t n, uint64_t length,
                  uint64_t total_epochs, uint64_t first_epoch = 0) {
  PlanSpec spec;
  spec.kind = SamplerKind::kExplicit;
  spec.ids = std::make_shared<std::vector<ItemId>>(ids);
  spec.dataset_size = n;
  spec.epoch_length = length;
  spec.total_epochs = total_epochs;
  spec.first_epoch = first_epoch;
  return spec;
}

std::vector<uint64_t> NextReads(const std::vector<ItemId>& seq) {
  std::vector<uint64_t> next(seq.size(), kNever);
  std::vector<uint64_t> last;
  for (size_t t = seq.size(); t-- > 0;) {
    if (seq[t] >= last.size()) last.resize(seq[t] + 1, kNever);
    next[t] = last[seq[t]];
    last[seq[t]] = t;
  }
  return next;
}

TEST_CASE("An open explicit plan knows what it was given and takes whole epochs",
          "[plan][explicit][append]") {
  const std::vector<ItemId> all = ShuffleSequence(10, 4, 3);
  std::unique_ptr<PlanSource> source;
  REQUIRE(OpenPlanSource(OpenPlan(Epochs(all, 10, 0, 2), 10, 10, 4), &source).ok());
  CHECK(source->shape().total_reads == 40);
  CHECK(source->shape().epochs == 4);
  CHECK(source->shape().epoch_length == 10);
  CHECK(source->first_position() == 0);
  CHECK(source->known_end() == 20);

  // Refused, each leaving the source as it was.
  CHECK(source->Append({1, 2, 3}).IsInvalidArgument());  // not a whole epoch
  CHECK(source->Append(Epochs(all, 10, 0, 3)).IsInvalidArgument());  // past the 4 epochs
  std::vector<ItemId> bad = Epochs(all, 10, 2, 1);
  bad[7] = 10;
  Status s = source->Append(bad);
  CHECK(s.IsOutOfRange());
  CHECK(s.message().find("position 27") != std::string::npos);
  CHECK(source->known_end() == 20);

  std::vector<ItemId> got(40);
  size_t n = 0;
  REQUIRE(source->Read(got.data(), 40, &n).ok());
  CHECK(n == 20);
  REQUIRE(source->Read(got.data() + 20, 20, &n).ok());
  CHECK(n == 0);  // nothing more known yet
  REQUIRE(source->Append(Epochs(all, 10, 2, 2)).ok());
  CHECK(source->known_end() == 40);
  REQUIRE(source->Read(got.data() + 20, 20, &n).ok());
  CHECK(n == 20);
  CHECK(got == all);
  CHECK(source->Append(Epochs(all, 10, 0, 1)).IsInvalidArgument());  // the plan is complete
}

TEST_CASE("Only an open explicit plan takes appended epochs", "[plan][explicit][append]") {
  PlanSpec whole = OpenPlan({0, 1, 2, 3}, 4, 4, 0);
  std::unique_ptr<PlanSource> source;
  REQUIRE(OpenPlanSource(whole, &source).ok());
  CHECK(source->known_end() == 4);
  CHECK(source->Append({3, 2, 1, 0}).IsInvalidArgument());
  PlanSpec shuffle;
  shuffle.dataset_size = 4;
  REQUIRE(OpenPlanSource(shuffle, &source).ok());
  CHECK(source->Append({3, 2, 1, 0}).IsInvalidArgument());
  // An open plan needs an epoch length that divides its ids, and epochs that fit.
  CHECK(OpenPlanSource(OpenPlan({0, 1, 2}, 4, 0, 3), &source).IsInvalidArgument());
  CHECK(OpenPlanSource(OpenPlan({0, 1, 2}, 4, 2, 3), &source).IsInvalidArgument());
  CHECK(OpenPlanSource(OpenPlan({0, 1, 2, 3}, 4, 2, 3, 2), &source).IsInvalidArgument());
  // Describe names an open plan's epochs apart from a whole plan of the same ids.
  CHECK(OpenPlan({0, 1}, 4, 2, 3).Describe() != OpenPlan({0, 1}, 4, 2, 0).Describe());
  CHECK(OpenPlan({0, 1}, 4, 2, 3).Describe() != OpenPlan({0, 1}, 4, 2, 3, 1).Describe());
}

// Streams an open plan of shuffled epochs, appending epoch e + ahead when
// position e * length is consumed; returns every access.
std::vector<Access> StreamOpen(const std::vector<ItemId>& all, uint64_t n, uint64_t epochs,
                               uint64_t ahead, uint64_t first_epoch, uint64_t window,
                               std::vector<Reveal>* reveals) {
  const uint64_t given = std::min(epochs - first_epoch, ahead + 1);
  std::unique_ptr<PlanSource> source;
  REQUIRE(OpenPlanSource(OpenPlan(Epochs(all, n, first_epoch, given), n, n, epochs, first_epoch),
                         &source)
              .ok());
  std::unique_ptr<NextUseStream> stream;
  REQUIRE(NextUseStream::Open(std::move(source), window, &stream).ok());
  CHECK_FALSE(stream->covers_whole_plan());
  uint64_t appended = first_epoch + given;
  std::vector<Access> accesses;
  Access a;
  Reveal r;
  while (true) {
    if (stream->position() % n == 0 && appended < epochs &&
        appended <= stream->position() / n + ahead) {
      REQUIRE(stream->Extend(Epochs(all, n, appended, 1), reveals).ok());
      ++appended;
    }
    if (!stream->Next(&a, &r)) break;
    if (r.valid) reveals->push_back(r);
    accesses.push_back(a);
  }
  REQUIRE(stream->status().ok());
  return accesses;
}

TEST_CASE("One epoch ahead, an open plan's next reads are exact", "[next_use][append]") {
  const uint64_t n = 50, epochs = 6;
  const std::vector<ItemId> all = ShuffleSequence(n, epochs, 11);
  const std::vector<uint64_t> next = NextReads(all);
  for (uint64_t window : {uint64_t{0}, 2 * n, 7 * n}) {
    std::vector<Reveal> reveals;
    std::vector<Access> got = StreamOpen(all, n, epochs, 1, 0, window, &reveals);
    REQUIRE(got.size() == all.size());
    for (size_t t = 0; t < got.size(); ++t) {
      CHECK(got[t].pos == t);
      CHECK(got[t].id == all[t]);
      CHECK(got[t].next == next[t]);  // never kFar
    }
    CHECK(reveals.empty());
  }
  // Given from a later epoch (a resume): positions still count from epoch 0.
  std::vector<Reveal> reveals;
  std::vector<Access> got = StreamOpen(all, n, epochs, 1, 3, 0, &reveals);
  REQUIRE(got.size() == 3 * n);
  for (size_t k = 0; k < got.size(); ++k) {
    CHECK(got[k].pos == 3 * n + k);
    CHECK(got[k].next == next[3 * n + k]);
  }
}

TEST_CASE("Appended late, unknown next reads are kFar and revealed once", "[next_use][append]") {
  const uint64_t n = 40, epochs = 5;
  const std::vector<ItemId> all = ShuffleSequence(n, epochs, 5);
  const std::vector<uint64_t> next = NextReads(all);
  std::vector<Reveal> reveals;
  // ahead 0: epoch e + 1 comes only when epoch e + 1 begins.
  std::vector<Access> got = StreamOpen(all, n, epochs, 0, 0, 0, &reveals);
  REQUIRE(got.size() == all.size());
  std::vector<uint64_t> far;
  for (size_t t = 0; t < got.size(); ++t) {
    if (next[t] == kNever) {
      CHECK(got[t].next == kNever);
    } else if (next[t] < (t / n + 1) * n) {
      CHECK(got[t].next == next[t]);  // inside the epoch: known
    } else {
      CHECK(got[t].next == kFar);
      far.push_back(t);
    }
  }
  CHECK(far.size() == (epochs - 1) * n);
  REQUIRE(reveals.size() == far.size());
  std::vector<uint64_t> revealed;
  for (const Reveal& r : reveals) {
    CHECK(all[r.next] == r.id);
    revealed.push_back(r.next);
  }
  std::vector<uint64_t> expected;
  for (uint64_t t : far) expected.push_back(next[t]);
  std::sort(revealed.begin(), revealed.end());
  std::sort(expected.begin(), expected.end());
  CHECK(revealed == expected);
}

// OPT's hits over a stream, reveals forwarded as the store's planner does.
uint64_t OptHits(const std::vector<Access>& accesses, const std::vector<Reveal>& reveals_at,
                 const std::vector<size_t>& reveal_step, uint64_t n, uint64_t capacity,
                 uint64_t window) {
  PolicyOptions po;
  po.kind = PolicyKind::kOpt;
  po.capacity = capacity;
  po.num_ids = n;
  po.window = window;
  po.track_ids = true;
  std::unique_ptr<Policy> policy;
  REQUIRE(NewPolicy(po, &policy).ok());
  uint64_t hits = 0;
  size_t k = 0;
  std::vector<ItemId> evicted;
  for (size_t t = 0; t < accesses.size(); ++t) {
    while (k < reveal_step.size() && reveal_step[k] == t) policy->OnReveal(reveals_at[k++]);
    evicted.clear();
    hits += policy->Step(accesses[t], 1, &evicted) ? 1 : 0;
  }
  return hits;
}

TEST_CASE("OPT over an open plan one epoch ahead hits as over the whole plan",
          "[next_use][append][opt]") {
  const uint64_t n = 200, epochs = 8;
  const std::vector<ItemId> all = ShuffleSequence(n, epochs, 17);
  std::vector<Access> whole;
  {
    std::unique_ptr<PlanSource> source;
    REQUIRE(OpenPlanSource(OpenPlan(all, n, n, 0), &source).ok());
    std::unique_ptr<NextUseStream> stream;
    REQUIRE(NextUseStream::Open(std::move(source), 0, &stream).ok());
    Access a;
    Reveal r;
    while (stream->Next(&a, &r)) whole.push_back(a);
  }
  std::vector<Reveal> reveals;
  std::vector<Access> open = StreamOpen(all, n, epochs, 1, 0, 0, &reveals);
  for (uint64_t capacity : {uint64_t{10}, uint64_t{60}, uint64_t{150}}) {
    const uint64_t full_hits = OptHits(whole, {}, {}, n, capacity, all.size());
    CHECK(OptHits(open, {}, {}, n, capacity, kOpenPlanWindowEpochs * n) == full_hits);
    // Shuffled epochs: OPT hits capacity x (epochs - 1), as DESIGN.md says.
    CHECK(full_hits == capacity * (epochs - 1));
  }
}

}  // namespace
}  // namespace opt4store
