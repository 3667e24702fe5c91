// Stats (store_impl.h, store_stats.h): reader counters live in the control
// block, summed over every process; the owner publishes its gauges there
// (every 50 ms from the planner thread, and on each Stats() call), so that a
// reader's Stats() sees them too, and so does `opt4store stats` on a store
// in use (live_store.cc). The disk tier's own figures are read directly in
// the owner.

#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "engine/store/store_impl.h"

namespace opt4store {

namespace {

bool IsRunCounter(const StatField& field) {
  const std::string_view group = field.group;
  return ((group == "reads" || group == "planner" || group == "peers") &&
          field.kind != StatKind::kFlag) ||
         std::string_view(field.name) == "disk_write_amplification";
}

}  // namespace

std::string Store::Impl::EncodeRunCounters(const StoreStats& st) {
  std::string out;
  VisitStats(st, [&](const StatField& field, auto value) {
    // Zero counts are left out (an admin open, which applies this, counts
    // none itself): the close that writes it may find the disk all but full.
    if (!IsRunCounter(field) || (value == 0 && field.kind != StatKind::kReal)) return;
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%.17g", static_cast<double>(value));
    out += std::string(field.name) + " " + buf + "\n";
  });
  return out;
}

StoreStats Store::Impl::ClosedStats(const StoreStats& live) {
  StoreStats st;
  ApplyRunCounters(EncodeRunCounters(live), &st);
  st.last_run = true;
#define OPT4STORE_COPY_DISK_STAT(group, type, field, kind, help) \
  if (std::string_view(#group) == "disk") st.field = live.field;
  OPT4STORE_STORE_STATS(OPT4STORE_COPY_DISK_STAT)
#undef OPT4STORE_COPY_DISK_STAT
  return st;
}

void Store::Impl::ApplyRunCounters(std::string_view text, StoreStats* st) {
  // The table's own names pick the fields, so that a counter added later
  // reads as 0 from an older store's text.
  auto set = [&](std::string_view name, double value) {
#define OPT4STORE_SET_STAT(group, type, field, kind, help) \
  if (name == #field) st->field = static_cast<type>(value);
    OPT4STORE_STORE_STATS(OPT4STORE_SET_STAT)
#undef OPT4STORE_SET_STAT
  };
  while (!text.empty()) {
    const size_t end = text.find('\n');
    const std::string_view line = text.substr(0, end);
    text = end == std::string_view::npos ? std::string_view() : text.substr(end + 1);
    const size_t space = line.find(' ');
    if (space == std::string_view::npos) continue;
    const std::string number(line.substr(space + 1));
    char* stop = nullptr;
    const double value = std::strtod(number.c_str(), &stop);
    if (stop == number.c_str()) continue;
    set(line.substr(0, space), value);
  }
  st->last_run = true;
}

void Store::Impl::PublishGaugesLocked() {
  last_publish_ns_ = NowNs();
  OwnerGauges& g = ctl_->gauges();
  g.prefetched.store(prefetched_.load());
  g.prefetch_bytes.store(prefetch_bytes_.load());
  g.planned_positions.store(residency_->planned());
  g.policy_hits.store(residency_->policy_hits());
  g.ram_insert_failures.store(insert_failures_.load());
  g.disk_put_errors.store(disk_put_errors_.load());
  g.abandoned_positions.store(residency_->abandoned());
  g.drift.store(residency_->drift());
  if (disk_) {
    DiskTierStats d = disk_->GetStats();
    g.disk_items.store(d.items);
    g.disk_live_bytes.store(d.live_bytes);
    g.disk_file_bytes.store(d.file_bytes);
    g.disk_budget.store(d.budget_bytes);
    g.disk_segments.store(d.segments);
    g.disk_write_amplification_bits.store(RealBits(d.write_amplification));
    g.disk_corrupt_records.store(d.corrupt_records);
    g.disk_evictions.store(d.evictions);
    g.disk_bypasses.store(d.bypasses);
    g.disk_compactions.store(d.compactions);
    g.disk_index_bytes_per_item_bits.store(RealBits(d.index_bytes_per_item));
    g.io_uring.store(d.io_uring ? 1 : 0);
    g.direct_io.store(d.direct_io ? 1 : 0);
  }
}

void ReadSharedStats(const ControlBlock* ctl, RamTier* ram, StoreStats* st) {
  if (ctl) {
    st->live = true;
    st->owner_pid = static_cast<uint64_t>(ctl->creator().pid);
    const SharedCounters& c = ctl->counters();
    st->accesses = c.accesses.load();
    st->hits_ram = c.hits_ram.load();
    st->hits_disk = c.hits_disk.load();
    st->hits_disk_bytes = c.hits_disk_bytes.load();
    st->hits_disk_direct = c.hits_disk_direct.load();
    st->source_loads = c.source_loads.load();
    st->puts = c.puts.load();
    st->puts_dropped = c.puts_dropped.load();
    st->waits = c.waits.load();
    st->wait_ns = c.wait_ns.load();
    st->fetch_requests = c.fetch_requests.load();
    st->fetch_timeouts = c.fetch_timeouts.load();
    st->expect_waits = c.expect_waits.load();
    st->plan_waits = c.plan_waits.load();
    st->expect_timeouts = c.expect_timeouts.load();
    st->peer_hits = c.peer_hits.load();
    st->peer_bytes_in = c.peer_bytes_in.load();
    st->peer_bytes_out = c.peer_bytes_out.load();
    const OwnerGauges& g = ctl->gauges();
    st->prefetched = g.prefetched.load();
    st->prefetch_bytes = g.prefetch_bytes.load();
    st->planned_positions = g.planned_positions.load();
    st->policy_hits = g.policy_hits.load();
    st->ram_insert_failures = g.ram_insert_failures.load();
    st->disk_put_errors = g.disk_put_errors.load();
    st->abandoned_positions = g.abandoned_positions.load();
    st->drift = g.drift.load();
    st->total_positions = g.total_positions.load();
    st->position = ctl->header()->frontier.load();
    const uint64_t epoch_length = g.epoch_length.load();
    st->epoch = epoch_length ? st->position / epoch_length : 0;
    st->ram_capacity = g.ram_capacity.load();
    st->ram_capacity_in_items = g.ram_capacity_in_items.load() != 0;
    st->disk_items = g.disk_items.load();
    st->disk_live_bytes = g.disk_live_bytes.load();
    st->disk_file_bytes = g.disk_file_bytes.load();
    st->disk_budget = g.disk_budget.load();
    st->disk_segments = g.disk_segments.load();
    st->disk_write_amplification = RealFromBits(g.disk_write_amplification_bits.load());
    st->disk_space_amplification =
        st->disk_live_bytes ? static_cast<double>(st->disk_file_bytes) / st->disk_live_bytes : 0;
    st->disk_corrupt_records = g.disk_corrupt_records.load();
    st->disk_evictions = g.disk_evictions.load();
    st->disk_bypasses = g.disk_bypasses.load();
    st->disk_compactions = g.disk_compactions.load();
    st->disk_index_bytes_per_item = RealFromBits(g.disk_index_bytes_per_item_bits.load());
    st->io_uring = g.io_uring.load() != 0;
    st->direct_io = g.direct_io.load() != 0;
  }
  if (ram) {
    RamTierStats r = ram->Stats();
    st->ram_items = r.items_resident;
    st->ram_bytes_used = r.bytes_stored;
    st->ram_bytes_peak = r.bytes_used_peak;
    st->ram_arena_bytes = r.capacity_bytes;
    // Per dataset id: the RAM tier's shared entry and owner handle, the
    // control block's expected position (8), record place (16) and
    // on-disk bit, the owner's prefetch pins (4), pending-read list (8) and
    // size (4). Not counted:
    // the policy's and the plan window's state, and the disk index
    // (bench/STORE.md measures them all).
    st->ram_bytes_per_item = r.table_bytes_per_item + r.owner_bytes_per_item + 8 + 16 + 4 + 8 + 4;
  }
}

StoreStats Store::Impl::Stats() {
  if (closed_.load() && !ctl_ && !disk_only_) return stats_at_close_;
  StoreStats st;
  const bool owner = InOwner() && !disk_only_ && ctl_;
  if (owner && !closed_.load()) {
    while (DrainWrites()) {  // count every Put so far on the disk tier
    }
  }
  if (owner) {
    // Under mu_: the owner's RAM tier reads its allocator, which the
    // planner thread changes under mu_. The gauges are published now, not
    // up to 50 ms ago, also for the counters Close saves (closed_ is set
    // by then, and the cursor's abandoned positions counted).
    MutexLock lock(&mu_);
    if (!closed_.load()) AdvanceFrontierLocked();
    if (residency_) PublishGaugesLocked();
    ReadSharedStats(ctl_.get(), ram_.get(), &st);
  } else {
    ReadSharedStats(ctl_.get(), ram_.get(), &st);
  }
  if (InOwner() && disk_) {
    DiskTierStats d = disk_->GetStats();
    st.disk_items = d.items;
    st.disk_live_bytes = d.live_bytes;
    st.disk_file_bytes = d.file_bytes;
    st.disk_budget = d.budget_bytes;
    st.disk_segments = d.segments;
    st.disk_write_amplification = d.write_amplification;
    st.disk_space_amplification =
        d.live_bytes ? static_cast<double>(d.file_bytes) / d.live_bytes : 0;
    st.disk_corrupt_records = d.corrupt_records;
    st.disk_evictions = d.evictions;
    st.disk_bypasses = d.bypasses;
    st.disk_compactions = d.compactions;
    st.disk_index_bytes_per_item = d.index_bytes_per_item;
    st.io_uring = d.io_uring;
    st.direct_io = d.direct_io;
  }
  // An admin open makes no reads or writes: the last run's figures instead.
  if (disk_only_ && !last_run_.empty()) ApplyRunCounters(last_run_, &st);
  return st;
}

}  // namespace opt4store
