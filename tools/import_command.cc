// opt4store import: fills a store from files, ahead of training. Either each
// regular file of a directory becomes one sample (its bytes, typed as raw
// bytes, its name kept in the value header), or each row of an .npy array
// becomes one sample (typed with the array's dtype and the row's shape).
// Ids are given in order from --first-id (default 0).
//
// Values go straight to the disk tier (admin mode); the RAM tier fills when a
// training job opens the store. Files are read one at a time and .npy rows
// are streamed, so memory stays at one sample whatever the input's size.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>

#include "cli_common.h"
#include "commands.h"
#include "npy_rows.h"
#include "opt4store/status.h"
#include "opt4store/store.h"
#include "opt4store/value.h"
#include "store_admin.h"

namespace opt4store {

namespace {

using Clock = std::chrono::steady_clock;

// The progress line is redrawn at most this often.
constexpr double kProgressInterval = 0.2;

struct ImportCommandOptions {
  std::string path;
  std::string from;
  std::string first_id;
};

// One input file of a directory import.
struct InputFile {
  std::string name;
  uint64_t size = 0;
};

double MiB(uint64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); }

// "id 4" or "ids 4..9". REQUIRES: count >= 1.
std::string IdRange(uint64_t first, uint64_t count) {
  if (count == 1) return "id " + std::to_string(first);
  return "ids " + std::to_string(first) + ".." + std::to_string(first + count - 1);
}

// Puts samples with consecutive ids and reports progress. The only place
// that talks to the store while importing.
class Importer {
 public:
  Importer(Store* store, uint64_t first_id, uint64_t total_items, uint64_t total_bytes)
      : store_(store),
        first_id_(first_id),
        total_items_(total_items),
        total_bytes_(total_bytes),
        show_progress_(isatty(STDERR_FILENO) == 1),
        start_(Clock::now()),
        last_draw_(start_) {}

  uint64_t items() const { return items_; }
  uint64_t bytes() const { return bytes_; }
  uint64_t next_id() const { return first_id_ + items_; }
  double Seconds() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }

  Status Put(std::string_view meta, std::string_view payload) {
    const uint64_t id = next_id();
    Status s = store_->Put(kNoPosition, static_cast<ItemId>(id), meta, payload);
    if (!s.ok()) return s.WithContext("sample " + std::to_string(id));
    ++items_;
    bytes_ += payload.size();
    if (show_progress_) {
      const Clock::time_point now = Clock::now();
      if (std::chrono::duration<double>(now - last_draw_).count() >= kProgressInterval) {
        last_draw_ = now;
        Draw();
      }
    }
    return Status::OK();
  }

  // Erases the progress line so that the summary starts on a clean one.
  void ClearProgress() {
    if (show_progress_) std::fputs("\r\033[K", stderr);
  }

 private:
  void Draw() {
    const double seconds = Seconds();
    const double rate = seconds > 0 ? MiB(bytes_) / seconds : 0;
    // Bytes predict better than items when file sizes vary.
    double eta = -1;
    if (total_bytes_ > 0 && bytes_ > 0) {
      eta = seconds * static_cast<double>(total_bytes_ - std::min(bytes_, total_bytes_)) /
            static_cast<double>(bytes_);
    } else if (items_ > 0) {
      eta = seconds * static_cast<double>(total_items_ - std::min(items_, total_items_)) /
            static_cast<double>(items_);
    }
    std::fprintf(stderr, "\r\033[Kimporting: %llu/%llu items, %.1f MiB, %.1f MiB/s, ETA %s",
                 static_cast<unsigned long long>(items_),
                 static_cast<unsigned long long>(total_items_), MiB(bytes_), rate,
                 FormatDuration(eta).c_str());
    std::fflush(stderr);
  }

  Store* store_;
  uint64_t first_id_;
  uint64_t total_items_;
  uint64_t total_bytes_;
  bool show_progress_;
  Clock::time_point start_;
  Clock::time_point last_draw_;
  uint64_t items_ = 0;
  uint64_t bytes_ = 0;
};

// The directory's regular files (symlinks to them included), sorted by name
// byte by byte. Hidden files and everything that is not a regular file are
// skipped and counted.
Status ListDirectory(const std::string& dir, std::vector<InputFile>* files, uint64_t* skipped) {
  files->clear();
  *skipped = 0;
  std::error_code ec;
  std::filesystem::directory_iterator it(dir, ec);
  if (ec) return Status::IOError("--from " + dir + ": " + ec.message());
  for (; it != std::filesystem::directory_iterator(); it.increment(ec)) {
    if (ec) return Status::IOError("--from " + dir + ": " + ec.message());
    const std::string name = it->path().filename().string();
    if (name.empty() || name[0] == '.') {
      ++*skipped;
      continue;
    }
    std::error_code type_ec;
    if (!it->is_regular_file(type_ec)) {
      ++*skipped;
      continue;
    }
    const uint64_t size = it->file_size(type_ec);
    if (type_ec) return Status::IOError(it->path().string() + ": " + type_ec.message());
    files->push_back(InputFile{name, size});
  }
  if (ec) return Status::IOError("--from " + dir + ": " + ec.message());
  // std::string compares as unsigned bytes (char_traits<char>::lt), like memcmp.
  std::sort(files->begin(), files->end(),
            [](const InputFile& a, const InputFile& b) { return a.name < b.name; });
  return Status::OK();
}

Status ReadWholeFile(const std::string& path, std::string* bytes) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return Status::FromErrno(path, errno);
  struct stat st;
  if (fstat(fileno(f), &st) != 0) {
    const int err = errno;
    std::fclose(f);
    return Status::FromErrno(path, err);
  }
  bytes->resize(static_cast<size_t>(st.st_size));
  size_t got = bytes->empty() ? 0 : std::fread(bytes->data(), 1, bytes->size(), f);
  const bool failed = std::ferror(f) != 0;
  const int err = errno;
  std::fclose(f);
  if (failed) return Status::FromErrno(path, err);
  // The file may have shrunk since it was listed; take what is there now.
  bytes->resize(got);
  return Status::OK();
}

Status CheckFits(uint64_t first_id, uint64_t count, uint64_t dataset_size,
                 const std::string& what) {
  if (count == 0) return Status::InvalidArgument("--from: " + what + " holds no samples to import");
  if (first_id >= dataset_size || count > dataset_size - first_id) {
    return Status::OutOfRange("--from: " + what + " holds " + Plural(count, "sample") + ", " +
                              IdRange(first_id, count) + ", but the store's dataset size is " +
                              std::to_string(dataset_size) + " (ids 0.." +
                              std::to_string(dataset_size - 1) + ")");
  }
  return Status::OK();
}

Status ImportDirectory(const std::string& dir, const std::vector<InputFile>& files,
                       Importer* importer) {
  std::string payload;
  ValueHeader header;
  header.dtype = DType::kBytes;
  for (const InputFile& file : files) {
    const std::string path = dir + "/" + file.name;
    OPT4STORE_RETURN_IF_ERROR(ReadWholeFile(path, &payload));
    header.shape = {static_cast<int64_t>(payload.size())};
    header.user = file.name;
    OPT4STORE_RETURN_IF_ERROR(importer->Put(EncodeValueHeader(header), payload).WithContext(path));
  }
  return Status::OK();
}

Status ImportNpy(NpyRowReader* reader, Importer* importer) {
  ValueHeader header;
  header.dtype = reader->dtype();
  header.shape = reader->row_shape();
  // Every row has the same header.
  const std::string meta = EncodeValueHeader(header);
  std::string row;
  while (reader->rows_read() < reader->rows()) {
    OPT4STORE_RETURN_IF_ERROR(reader->ReadRow(&row));
    OPT4STORE_RETURN_IF_ERROR(importer->Put(meta, row));
  }
  return Status::OK();
}

std::string ShapeText(const std::vector<uint64_t>& shape) {
  std::string text = "(";
  for (size_t i = 0; i < shape.size(); ++i) {
    text += (i ? ", " : "") + std::to_string(shape[i]);
  }
  return text + (shape.size() == 1 ? ",)" : ")");
}

Status RunImport(const ImportCommandOptions& o) {
  uint64_t first_id = 0;
  if (!o.first_id.empty()) {
    OPT4STORE_RETURN_IF_ERROR(ParseCount(o.first_id, &first_id).WithContext("--first-id"));
  }

  // Look at the input before opening the store: cheap errors first.
  struct stat st;
  if (stat(o.from.c_str(), &st) != 0) return Status::FromErrno("--from " + o.from, errno);
  const bool is_dir = S_ISDIR(st.st_mode);
  std::vector<InputFile> files;
  uint64_t skipped = 0;
  std::unique_ptr<NpyRowReader> npy;
  uint64_t count = 0, total_bytes = 0;
  std::string what;
  if (is_dir) {
    OPT4STORE_RETURN_IF_ERROR(ListDirectory(o.from, &files, &skipped));
    count = files.size();
    for (const InputFile& f : files) total_bytes += f.size;
    what = "directory " + o.from;
  } else {
    const bool npy_name = o.from.size() >= 4 && o.from.compare(o.from.size() - 4, 4, ".npy") == 0;
    if (!S_ISREG(st.st_mode) || !npy_name) {
      return Status::InvalidArgument("--from " + o.from +
                                     ": give a directory (one sample per file) or an .npy "
                                     "file (one sample per row)");
    }
    OPT4STORE_RETURN_IF_ERROR(NpyRowReader::Open(o.from, &npy));
    count = npy->rows();
    total_bytes = count * npy->row_bytes();
    what = o.from;
  }

  std::unique_ptr<Store> store;
  OPT4STORE_RETURN_IF_ERROR(OpenExistingStore(o.path, &store));
  OPT4STORE_RETURN_IF_ERROR(CheckFits(first_id, count, store->dataset_size(), what));

  const StoreStats before = store->Stats();
  Importer importer(store.get(), first_id, count, total_bytes);
  Status status =
      is_dir ? ImportDirectory(o.from, files, &importer) : ImportNpy(npy.get(), &importer);
  importer.ClearProgress();
  // What was put stays put, even after a failure: make it durable.
  Status flushed = store->Flush();
  const StoreStats after = store->Stats();
  Status closed = CloseStore(o.path, &store);
  const double seconds = importer.Seconds();

  const std::string done =
      importer.items() == 0
          ? std::string("nothing was imported")
          : Plural(importer.items(), "sample") + " (" + IdRange(first_id, importer.items()) + ", " +
                FormatSize(importer.bytes()) + ") " + (importer.items() == 1 ? "was" : "were") +
                " imported" + (flushed.ok() ? " and flushed" : "");
  if (!status.ok()) return status.WithContext("import stopped after " + done);
  if (!flushed.ok()) return flushed.WithContext("imported " + done + ", but Flush failed");
  OPT4STORE_RETURN_IF_ERROR(closed);

  const uint64_t refused = after.disk_put_errors - before.disk_put_errors;
  if (refused > 0) {
    return Status::NoSpace("the disk tier refused " + Plural(refused, "sample") + " of " +
                           std::to_string(importer.items()) +
                           " (disk full, or a sample larger than its budget); see the "
                           "warnings above");
  }
  // Evicted to make room, or, where a plan ranks them, left out
  // (DiskTierOptions::bypass).
  const uint64_t evicted = after.disk_evictions - before.disk_evictions +
                           after.disk_bypasses - before.disk_bypasses;
  if (evicted > 0) {
    LogStoreWarning("the disk budget (" + FormatSize(after.disk_budget) +
                    ") is too small: " + Plural(evicted, "sample") +
                    (evicted == 1 ? " was" : " were") + " left out or evicted");
  }
  // Values are immutable per id: an id that already had one kept it.
  const uint64_t grown =
      after.disk_items >= before.disk_items ? after.disk_items - before.disk_items : 0;
  if (grown + evicted < importer.items()) {
    LogStoreWarning(Plural(importer.items() - grown - evicted, "id") +
                    " already held a value; values are immutable per id, so the old ones "
                    "were kept");
  }

  std::string line = "imported " + Plural(importer.items(), "sample") + " (" +
                     IdRange(first_id, importer.items()) + ") from " + o.from;
  if (is_dir) {
    if (skipped) line += " (skipped " + std::to_string(skipped) + " hidden or non-regular entries)";
  } else {
    line += std::string(" (") + DTypeName(npy->dtype()) + " " + ShapeText(npy->shape()) + ")";
  }
  line += StringPrintf(": %s in %s, %.1f MiB/s\n", FormatSize(importer.bytes()).c_str(),
                       FormatDuration(seconds).c_str(),
                       seconds > 0 ? MiB(importer.bytes()) / seconds : 0.0);
  return WriteStdout(line);
}

}  // namespace

Command AddImportCommand(CLI::App* parent) {
  auto options = std::make_shared<ImportCommandOptions>();
  CLI::App* app = parent->add_subcommand(
      "import",
      "Fill a store from a directory (one sample per file) or an .npy file (one sample per "
      "row).\n"
      "  opt4store import /data/cache --from /data/decoded/\n"
      "  opt4store import /data/cache --from images.npy --first-id 1000");
  app->footer(
      "DIR: every regular file (symlinks to one included) whose name does not start with '.',\n"
      "  in byte order of the names, not recursive. Payload: the file's bytes; value header:\n"
      "  dtype bytes, shape (size,), user = the file name.\n"
      "FILE.npy: a C-order numeric array (bool, ints, floats, complex; little-endian). Row i\n"
      "  along axis 0 becomes id FIRST+i, with the array's dtype and the row's shape (a scalar\n"
      "  for a 1-D array). Fortran order, object, string and structured dtypes are refused.\n"
      "The samples must fit in the store's ids [0, dataset size). An id that already holds a\n"
      "value keeps it (values are immutable per id). Progress is shown on stderr when it is a\n"
      "terminal.");
  AddStoreArgument(app, &options->path);
  app->add_option("--from", options->from, "A directory, or an .npy file")
      ->required()
      ->type_name("DIR|FILE.npy");
  app->add_option("--first-id", options->first_id, "Id of the first sample (default 0)")
      ->type_name("N");
  return Command{app, [options] { return RunImport(*options); }};
}

}  // namespace opt4store
