// NextUseStream against a brute-force next-use array computed from the whole
// sequence, for many random sequences and windows:
//   - access t: the exact next read when it lies in [t, t + window); kNever
//     when there is none and the plan ends inside the window; kFar otherwise;
//   - every kFar that has a later read is revealed exactly once, with the
//     right position, by the step that brings that position into the window:
//     consuming t brings in t + window;
//   - PeekId for every position in [position(), lookahead_end()).
#include "opt4store/next_use.h"

#include <algorithm>
#include <cstdint>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "opt4store/plan.h"
#include "test_util.h"

namespace opt4store {
namespace {

std::vector<uint64_t> BruteNext(const std::vector<ItemId>& seq) {
  std::vector<uint64_t> next(seq.size(), kNever);
  for (size_t t = 0; t < seq.size(); ++t) {
    for (size_t q = t + 1; q < seq.size(); ++q) {
      if (seq[q] == seq[t]) {
        next[t] = q;
        break;
      }
    }
  }
  return next;
}

// Faster, for long sequences; checked against BruteNext below.
std::vector<uint64_t> BackwardNext(const std::vector<ItemId>& seq) {
  std::vector<uint64_t> next(seq.size(), kNever);
  std::vector<uint64_t> last;
  for (size_t t = seq.size(); t-- > 0;) {
    if (seq[t] >= last.size()) last.resize(seq[t] + 1, kNever);
    next[t] = last[seq[t]];
    last[seq[t]] = t;
  }
  return next;
}

std::vector<uint64_t> PrevOf(const std::vector<ItemId>& seq) {
  std::vector<uint64_t> prev(seq.size(), kNever);
  std::vector<uint64_t> last;
  for (size_t t = 0; t < seq.size(); ++t) {
    if (seq[t] >= last.size()) last.resize(seq[t] + 1, kNever);
    prev[t] = last[seq[t]];
    last[seq[t]] = t;
  }
  return prev;
}

PlanSpec Explicit(std::vector<ItemId> ids) {
  PlanSpec s;
  s.kind = SamplerKind::kExplicit;
  s.ids = std::make_shared<const std::vector<ItemId>>(std::move(ids));
  return s;
}

std::string Show(uint64_t v) {
  if (v == kNever) return "kNever";
  if (v == kFar) return "kFar";
  return std::to_string(v);
}

struct StreamStats {
  uint64_t far = 0;      // kFar accesses
  uint64_t reveals = 0;  // valid reveals
};

// Walks `spec` (whose ids are `seq`) through a NextUseStream with
// `window_arg` and compares everything with the brute force. Returns the
// first discrepancy, or "" when there is none.
std::string CheckStream(const PlanSpec& spec, const std::vector<ItemId>& seq,
                        uint64_t window_arg, StreamStats* stats = nullptr,
                        bool all_peeks = false) {
  std::ostringstream err;
  const uint64_t total = seq.size();
  const std::vector<uint64_t> next = BackwardNext(seq);
  const std::vector<uint64_t> prev = PrevOf(seq);
  const uint64_t w = window_arg == 0 ? std::min<uint64_t>(total, kDefaultWindow)
                                     : std::min<uint64_t>(window_arg, total);

  std::unique_ptr<PlanSource> source;
  Status st = OpenPlanSource(spec, &source);
  if (!st.ok()) return "OpenPlanSource: " + st.ToString();
  std::unique_ptr<NextUseStream> stream;
  st = NextUseStream::Open(std::move(source), window_arg, &stream);
  if (!st.ok()) return "NextUseStream::Open: " + st.ToString();
  if (stream->window() != w) {
    err << "window() " << stream->window() << " want " << w;
    return err.str();
  }
  if (stream->covers_whole_plan() != (w >= total)) return "covers_whole_plan() wrong";
  if (stream->shape().total_reads != total) return "shape().total_reads wrong";

  auto check_window = [&](uint64_t consumed) -> bool {
    if (stream->position() != consumed) {
      err << "position() " << stream->position() << " want " << consumed;
      return false;
    }
    const uint64_t want_end = std::min(consumed + w, total);
    if (stream->lookahead_end() != want_end) {
      err << "after " << consumed << " consumed: lookahead_end() " << stream->lookahead_end()
          << " want " << want_end;
      return false;
    }
    const uint64_t span = want_end - consumed;
    const bool every = all_peeks || span <= 64;
    auto peek_ok = [&](uint64_t k) {
      const uint64_t p = consumed + k;
      if (stream->PeekId(p) == seq[p]) return true;
      err << "PeekId(" << p << ") " << stream->PeekId(p) << " want " << seq[p];
      return false;
    };
    if (every) {
      for (uint64_t k = 0; k < span; ++k) {
        if (!peek_ok(k)) return false;
      }
      return true;
    }
    // Long windows: the first and last few slots at every step, and every
    // 61st step a stride through the middle that moves with the ring's head.
    for (uint64_t k = 0; k < 8; ++k) {
      if (!peek_ok(k) || !peek_ok(span - 1 - k)) return false;
    }
    if (consumed % 61 == 0) {
      for (uint64_t k = consumed % 97; k < span; k += 97) {
        if (!peek_ok(k)) return false;
      }
    }
    return true;
  };

  if (!check_window(0)) return err.str();
  std::vector<bool> revealed(total, false);
  StreamStats local;
  for (uint64_t t = 0; t < total; ++t) {
    Access a;
    a.pos = 0xABCDEF;
    a.id = 0xABCD;
    a.next = 12345;
    Reveal r;
    r.valid = true;
    r.id = 0xBEEF;
    r.next = 4242;
    if (!stream->Next(&a, &r)) {
      err << "Next() returned false at " << t << " of " << total << ": "
          << stream->status().ToString();
      return err.str();
    }
    if (a.pos != t || a.id != seq[t]) {
      err << "access " << t << ": pos " << a.pos << " id " << a.id << " want id " << seq[t];
      return err.str();
    }
    uint64_t want;
    if (next[t] != kNever && next[t] < t + w) {
      want = next[t];
    } else if (next[t] == kNever && t + w >= total) {
      want = kNever;
    } else {
      want = kFar;
    }
    if (a.next != want) {
      err << "access " << t << " (id " << seq[t] << ", true next " << Show(next[t])
          << ", window " << w << ", total " << total << "): next " << Show(a.next) << " want "
          << Show(want);
      return err.str();
    }
    if (a.next == kFar) ++local.far;
    // Consuming t brings position t + w into the window.
    const uint64_t in = t + w;
    const bool want_reveal = in < total && prev[in] != kNever && prev[in] <= t;
    if (r.valid != want_reveal) {
      err << "step " << t << " (window " << w << "): reveal.valid " << r.valid << " want "
          << want_reveal;
      return err.str();
    }
    if (r.valid) {
      if (r.id != seq[in] || r.next != in) {
        err << "step " << t << ": reveal {" << r.id << ", " << r.next << "} want {" << seq[in]
            << ", " << in << "}";
        return err.str();
      }
      // It resolves the kFar given at the id's previous read, once.
      if (revealed[prev[in]]) {
        err << "position " << prev[in] << " revealed twice";
        return err.str();
      }
      revealed[prev[in]] = true;
      ++local.reveals;
    }
    if (!check_window(t + 1)) return err.str();
  }
  // Every kFar with a later read was revealed; none without one.
  for (uint64_t t = 0; t < total; ++t) {
    const bool was_far = next[t] != kNever && next[t] >= t + w;
    if (was_far != revealed[t]) {
      err << "position " << t << ": far " << was_far << " revealed " << revealed[t];
      return err.str();
    }
  }
  for (int k = 0; k < 2; ++k) {
    Access a;
    Reveal r;
    r.valid = true;
    if (stream->Next(&a, &r)) return "Next() returned true past the end";
    if (r.valid) return "reveal.valid past the end";
    if (!stream->status().ok()) return "status() at the end: " + stream->status().ToString();
  }
  if (stats) *stats = local;
  return "";
}

TEST_CASE("The brute-force helpers agree", "[next_use][reference]") {
  std::mt19937_64 rng(5);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<ItemId> seq(rng() % 300 + 1);
    for (auto& x : seq) x = static_cast<ItemId>(rng() % 20);
    REQUIRE(BruteNext(seq) == BackwardNext(seq));
  }
}

TEST_CASE("A hand-checked stream with window 3", "[next_use]") {
  // pos: 0 1 2 3 4 5 6
  // id : 5 6 5 7 6 5 8     window 3 (7 reads)
  //  t=0: window [0,3): 5 again at 2 -> 2.        brings in 3 (7, first read)
  //  t=1: window [1,4): 6 next at 4 -> kFar.      brings in 4 (6, prev 1 <= 1): reveal {6,4}
  //  t=2: window [2,5): 5 next at 5 -> kFar.      brings in 5 (5, prev 2 <= 2): reveal {5,5}
  //  t=3: window [3,6): 7 never again, 6 < 7: kFar. brings in 6 (8, first read)
  //  t=4: window [4,7) reaches the end: kNever.   nothing left to bring in
  //  t=5: kNever.  t=6: kNever.
  const std::vector<ItemId> seq = {5, 6, 5, 7, 6, 5, 8};
  std::unique_ptr<PlanSource> source;
  REQUIRE(OpenPlanSource(Explicit(seq), &source).ok());
  std::unique_ptr<NextUseStream> stream;
  REQUIRE(NextUseStream::Open(std::move(source), 3, &stream).ok());
  CHECK(stream->window() == 3);
  CHECK_FALSE(stream->covers_whole_plan());
  CHECK(stream->lookahead_end() == 3);
  const uint64_t want_next[] = {2, kFar, kFar, kFar, kNever, kNever, kNever};
  const bool want_valid[] = {false, true, true, false, false, false, false};
  const Reveal want_reveal[] = {{}, {true, 6, 4}, {true, 5, 5}, {}, {}, {}, {}};
  for (uint64_t t = 0; t < seq.size(); ++t) {
    INFO("t = " << t);
    Access a;
    Reveal r;
    REQUIRE(stream->Next(&a, &r));
    CHECK(a.pos == t);
    CHECK(a.id == seq[t]);
    CHECK(a.next == want_next[t]);
    CHECK(r.valid == want_valid[t]);
    if (want_valid[t]) {
      CHECK(r.id == want_reveal[t].id);
      CHECK(r.next == want_reveal[t].next);
    }
  }
  Access a;
  Reveal r;
  CHECK_FALSE(stream->Next(&a, &r));
  CHECK(stream->status().ok());
}

TEST_CASE("NextUseStream equals brute force on random sequences and windows", "[next_use]") {
  std::mt19937_64 rng(20240611);
  const std::vector<uint64_t> id_counts = {1, 2, 3, 10, 100, 1000};
  uint64_t total_far = 0, total_reveals = 0, cases = 0;
  for (int trial = 0; trial < 90; ++trial) {
    const uint64_t len = trial < 10 ? static_cast<uint64_t>(trial + 1) : rng() % 3000 + 1;
    const uint64_t ids = trial % 7 == 6 ? len : id_counts[rng() % id_counts.size()];
    std::vector<ItemId> seq(len);
    for (auto& x : seq) x = static_cast<ItemId>(rng() % ids);
    std::vector<uint64_t> windows = {1, 2, 7, 64, len, len + 5, 0, rng() % len + 1};
    for (uint64_t w : windows) {
      INFO("trial " << trial << " len " << len << " ids " << ids << " window " << w);
      StreamStats stats;
      const std::string problem = CheckStream(Explicit(seq), seq, w, &stats, trial < 5);
      REQUIRE(problem == "");
      total_far += stats.far;
      total_reveals += stats.reveals;
      ++cases;
    }
  }
  // The sweep did exercise far accesses and reveals.
  CHECK(total_far > 1000);
  CHECK(total_reveals > 1000);
  CHECK(cases == 90 * 8);
}

TEST_CASE("Long plans: windows across the stream's source chunks", "[next_use][long]") {
  // Longer than any read buffer a stream is likely to use (64 Ki ids), so
  // that refills, ring wrap-arounds and reveals meet at every boundary.
  std::mt19937_64 rng(77);
  std::vector<ItemId> seq(200000);
  for (auto& x : seq) x = static_cast<ItemId>(std::min(rng() % 5000, rng() % 5000));
  for (uint64_t w : {1000ull, 65535ull, 65536ull, 65537ull, 131073ull, 0ull}) {
    INFO("window " << w);
    StreamStats stats;
    REQUIRE(CheckStream(Explicit(seq), seq, w, &stats) == "");
    if (w != 0) CHECK(stats.reveals > 0);
  }
  PlanSpec rep;
  rep.kind = SamplerKind::kReplacement;
  rep.dataset_size = 30000;
  rep.epochs = 5;
  rep.seed = 3;
  std::vector<ItemId> rseq, epoch;
  for (uint64_t e = 0; e < rep.epochs; ++e) {
    GenerateEpoch(rep, e, &epoch);
    rseq.insert(rseq.end(), epoch.begin(), epoch.end());
  }
  for (uint64_t w : {70000ull, 30000ull}) {
    INFO("replacement, window " << w);
    REQUIRE(CheckStream(rep, rseq, w) == "");
  }
}

TEST_CASE("A plan file that breaks mid-stream stops the stream with an error",
          "[next_use]") {
  opt4store_test::TempDir dir;
  const std::string path = dir.File("plan.u32");
  auto write = [&](uint32_t count) {
    std::string bytes;
    for (uint32_t i = 0; i < count; ++i) bytes += opt4store_test::LE((i * 7) % 300, 4);
    opt4store_test::WriteBytes(path, bytes);
  };
  write(200000);
  PlanSpec spec;
  spec.kind = SamplerKind::kFile;
  spec.path = path;
  std::unique_ptr<PlanSource> source;
  REQUIRE(OpenPlanSource(spec, &source).ok());
  std::unique_ptr<NextUseStream> stream;
  REQUIRE(NextUseStream::Open(std::move(source), 1000, &stream).ok());
  write(5000);  // truncated behind the stream's back
  Access a;
  Reveal r;
  uint64_t consumed = 0;
  while (stream->Next(&a, &r)) ++consumed;
  CHECK(consumed < 200000);
  CHECK_FALSE(stream->status().ok());
  CHECK_FALSE(stream->Next(&a, &r));
  CHECK_FALSE(stream->status().ok());
}

TEST_CASE("covers_whole_plan and the default window", "[next_use]") {
  const std::vector<ItemId> seq = {1, 2, 3, 1, 2, 3, 4, 4};
  for (uint64_t w : {0ull, 8ull, 9ull, 1000ull}) {
    std::unique_ptr<PlanSource> source;
    REQUIRE(OpenPlanSource(Explicit(seq), &source).ok());
    std::unique_ptr<NextUseStream> stream;
    REQUIRE(NextUseStream::Open(std::move(source), w, &stream).ok());
    INFO("window " << w);
    CHECK(stream->window() == 8);  // 0 = min(total, default); larger is clamped
    CHECK(stream->covers_whole_plan());
    CHECK(stream->position() == 0);
    CHECK(stream->lookahead_end() == 8);
    // Whole-plan window: never a kFar, never a reveal.
    Access a;
    Reveal r;
    while (stream->Next(&a, &r)) {
      CHECK(a.next != kFar);
      CHECK_FALSE(r.valid);
    }
  }
  for (uint64_t w : {1ull, 7ull}) {
    std::unique_ptr<PlanSource> source;
    REQUIRE(OpenPlanSource(Explicit(seq), &source).ok());
    std::unique_ptr<NextUseStream> stream;
    REQUIRE(NextUseStream::Open(std::move(source), w, &stream).ok());
    CHECK(stream->window() == w);
    CHECK_FALSE(stream->covers_whole_plan());
  }
}

TEST_CASE("The default window is 8 Mi positions when the plan is longer", "[next_use][slow]") {
  PlanSpec spec;
  spec.kind = SamplerKind::kSequential;
  spec.dataset_size = kDefaultWindow + 10;
  spec.epochs = 1;
  std::unique_ptr<PlanSource> source;
  REQUIRE(OpenPlanSource(spec, &source).ok());
  std::unique_ptr<NextUseStream> stream;
  REQUIRE(NextUseStream::Open(std::move(source), 0, &stream).ok());
  CHECK(stream->window() == kDefaultWindow);
  CHECK_FALSE(stream->covers_whole_plan());
  CHECK(stream->lookahead_end() == kDefaultWindow);
  CHECK(stream->PeekId(kDefaultWindow - 1) == kDefaultWindow - 1);
  // Each id is read once. While the end of the plan is beyond the window the
  // stream cannot know that: kFar. From t = 10 on the end is inside: kNever.
  for (uint64_t t = 0; t < 12; ++t) {
    Access a;
    Reveal r;
    REQUIRE(stream->Next(&a, &r));
    CHECK(a.id == t);
    CHECK(a.next == (t < 10 ? kFar : kNever));
    CHECK_FALSE(r.valid);
  }
  CHECK(stream->lookahead_end() == kDefaultWindow + 10);
}

TEST_CASE("Generated plans through the stream", "[next_use]") {
  auto sequence_of = [](const PlanSpec& spec) {
    std::vector<ItemId> all, epoch;
    for (uint64_t e = 0; e < spec.epochs; ++e) {
      GenerateEpoch(spec, e, &epoch);
      all.insert(all.end(), epoch.begin(), epoch.end());
    }
    return all;
  };
  SECTION("shuffled epochs: a window of 2 epochs gives no kFar at all") {
    for (uint64_t n : {1ull, 2ull, 50ull, 777ull}) {
      PlanSpec spec;
      spec.kind = SamplerKind::kShuffle;
      spec.dataset_size = n;
      spec.epochs = 5;
      spec.seed = n;
      const std::vector<ItemId> seq = sequence_of(spec);
      StreamStats stats;
      INFO("n " << n);
      REQUIRE(CheckStream(spec, seq, 2 * n, &stats) == "");
      CHECK(stats.far == 0);
      CHECK(stats.reveals == 0);
      // A window of half an epoch surely gives kFar, and reveals.
      if (n >= 50) {
        REQUIRE(CheckStream(spec, seq, n / 2, &stats) == "");
        CHECK(stats.far > 0);
        CHECK(stats.reveals > 0);
      }
    }
  }
  SECTION("replacement and distributed plans") {
    PlanSpec rep;
    rep.kind = SamplerKind::kReplacement;
    rep.dataset_size = 300;
    rep.epochs = 3;
    rep.seed = 1;
    const std::vector<ItemId> rseq = sequence_of(rep);
    for (uint64_t w : {1ull, 17ull, 300ull, 0ull}) REQUIRE(CheckStream(rep, rseq, w) == "");
    PlanSpec dist;
    dist.kind = SamplerKind::kDistributed;
    dist.dataset_size = 301;
    dist.epochs = 4;
    dist.world_size = 4;
    dist.rank = 3;
    const std::vector<ItemId> dseq = sequence_of(dist);
    for (uint64_t w : {3ull, 76ull, 152ull, 0ull}) REQUIRE(CheckStream(dist, dseq, w) == "");
  }
}

}  // namespace
}  // namespace opt4store

namespace opt4store {
namespace {

struct Step {
  Access access;
  Reveal reveal;
};

// The reference: one Next() per position.
std::vector<Step> ByNext(const PlanSpec& spec, uint64_t window) {
  std::unique_ptr<PlanSource> source;
  REQUIRE(OpenPlanSource(spec, &source).ok());
  std::unique_ptr<NextUseStream> stream;
  REQUIRE(NextUseStream::Open(std::move(source), window, &stream).ok());
  std::vector<Step> steps;
  Step s;
  while (stream->Next(&s.access, &s.reveal)) steps.push_back(s);
  REQUIRE(stream->status().ok());
  return steps;
}

std::string SameAccess(const Access& a, const Access& b) {
  if (a.pos == b.pos && a.id == b.id && a.next == b.next) return "";
  std::ostringstream err;
  err << "{" << a.pos << "," << a.id << "," << Show(a.next) << "} vs {" << b.pos << "," << b.id
      << "," << Show(b.next) << "}";
  return err.str();
}

TEST_CASE("NextBatch is the same as that many Next() calls", "[next_use][batch]") {
  std::mt19937_64 rng(4711);
  for (int trial = 0; trial < 60; ++trial) {
    const uint64_t len = rng() % 2000 + 1;
    const uint64_t ids = 1 + rng() % (trial % 2 ? 30 : 600);
    std::vector<ItemId> seq(len);
    for (auto& x : seq) x = static_cast<ItemId>(rng() % ids);
    for (uint64_t w : std::vector<uint64_t>{1, 5, 64, len / 3 + 1, len, 0}) {
      INFO("trial " << trial << " len " << len << " window " << w);
      const std::vector<Step> want = ByNext(Explicit(seq), w);
      REQUIRE(want.size() == len);
      std::unique_ptr<PlanSource> source;
      REQUIRE(OpenPlanSource(Explicit(seq), &source).ok());
      std::unique_ptr<NextUseStream> stream;
      REQUIRE(NextUseStream::Open(std::move(source), w, &stream).ok());
      std::vector<Access> batch(80);
      std::vector<StepReveal> reveals;
      uint64_t done = 0;
      while (done < len) {
        if (rng() % 5 == 0) {
          // Next() and NextBatch() mix freely.
          Step s;
          REQUIRE(stream->Next(&s.access, &s.reveal));
          REQUIRE(SameAccess(s.access, want[done].access) == "");
          REQUIRE(s.reveal.valid == want[done].reveal.valid);
          ++done;
          continue;
        }
        const size_t max = 1 + rng() % batch.size();
        reveals.clear();
        reveals.push_back({999, 1, 2});  // appended to, not cleared
        const size_t n = stream->NextBatch(batch.data(), max, &reveals);
        REQUIRE(n >= 1);
        REQUIRE(n <= max);
        REQUIRE(n <= len - done);
        REQUIRE(reveals.size() >= 1);
        REQUIRE(reveals[0].step == 999);
        size_t r = 1;
        for (size_t i = 0; i < n; ++i) {
          const Step& expected = want[done + i];
          INFO("position " << done + i);
          REQUIRE(SameAccess(batch[i], expected.access) == "");
          if (expected.reveal.valid) {
            REQUIRE(r < reveals.size());
            CHECK(reveals[r].step == i);
            CHECK(reveals[r].id == expected.reveal.id);
            CHECK(reveals[r].next == expected.reveal.next);
            ++r;
          }
        }
        REQUIRE(r == reveals.size());  // no reveal the Next() calls did not make
        done += n;
        REQUIRE(stream->position() == done);
        const uint64_t end = std::min(done + stream->window(), len);
        REQUIRE(stream->lookahead_end() == end);
        if (done < len) REQUIRE(stream->PeekId(done) == seq[done]);
        if (end > done) REQUIRE(stream->PeekId(end - 1) == seq[end - 1]);
      }
      reveals.clear();
      CHECK(stream->NextBatch(batch.data(), batch.size(), &reveals) == 0);
      CHECK(reveals.empty());
      CHECK(stream->status().ok());
    }
  }
}

}  // namespace
}  // namespace opt4store
