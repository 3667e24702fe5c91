// opt4store get: reads one sample back out of a store: its payload bytes to
// a file (or stdout), and with --meta its decoded value header.
//
// A read that finds a corrupt record does not return wrong bytes: the store
// drops the record and reports a miss, which this command tells apart from
// a plain "not there" by the store's corrupt-record counter.
#include <cerrno>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>

#include <CLI/CLI.hpp>

#include "cli_common.h"
#include "commands.h"
#include "opt4store/read_sink.h"
#include "opt4store/status.h"
#include "opt4store/store.h"
#include "opt4store/value.h"
#include "store_admin.h"

namespace opt4store {

namespace {

struct GetCommandOptions {
  std::string path;
  std::string id;
  std::string output;
  bool meta = false;
};

const char* SourceName(GetSource source) {
  switch (source) {
    case GetSource::kRam: return "RAM tier";
    case GetSource::kDisk: return "disk tier";
    case GetSource::kMiss: return "miss";
  }
  return "unknown";
}

// What a tag means when the Python package stored the value.
std::string TagMeaning(uint32_t tag) {
  switch (tag) {
    case kPythonTensor: return " (a torch tensor, from Python)";
    case kPythonArray: return " (a numpy array, from Python)";
    case kPythonStruct: return " (a Python structure of tensors, arrays and numbers)";
    case kPythonPickle: return " (a pickled Python object)";
    default: return "";
  }
}

// Printable text, with other bytes as \xNN, so that a binary `user` field
// cannot garble the terminal.
std::string Escaped(std::string_view bytes) {
  std::string out;
  for (unsigned char c : bytes) {
    if (c >= 32 && c < 127 && c != '\\') {
      out += static_cast<char>(c);
    } else {
      out += StringPrintf("\\x%02x", c);
    }
  }
  return out;
}

std::string MetaText(ItemId id, GetSource source, const std::string& meta,
                     const std::string& payload) {
  std::string out = "id:       " + std::to_string(id) + "\n";
  out += std::string("source:   ") + SourceName(source) + "\n";
  ValueHeader header;
  Status decoded = DecodeValueHeader(meta, &header);
  if (!decoded.ok()) {
    // Values Put by other code may carry any meta: show it, do not fail.
    out += "meta:     " + std::to_string(meta.size()) + " bytes, not an opt4store value header\n";
    out += "payload:  " + std::to_string(payload.size()) + " bytes\n";
    return out;
  }
  std::string shape = "(";
  for (size_t i = 0; i < header.shape.size(); ++i) {
    shape += (i ? ", " : "") + std::to_string(header.shape[i]);
  }
  shape += header.shape.size() == 1 ? ",)" : ")";
  out += std::string("dtype:    ") + DTypeName(header.dtype) + "\n";
  out += "shape:    " + shape + "\n";
  out += "tag:      " + std::to_string(header.tag) + TagMeaning(header.tag) + "\n";
  if (header.tag == kPythonStruct || header.tag == kPythonPickle) {
    // A pickle: unreadable here, and Python's opt4store decodes it.
    out += "user:     " + std::to_string(header.user.size()) +
           " bytes (pickled; Store.get in Python returns the value)\n";
  } else {
    out += "user:     " + Escaped(header.user) + "\n";
  }
  out += "payload:  " + std::to_string(payload.size()) + " bytes";
  if (header.PayloadBytes() != payload.size()) {
    out += " (the header's dtype and shape say " + std::to_string(header.PayloadBytes()) + ")";
  }
  return out + "\n";
}

Status WriteFile(const std::string& path, const std::string& bytes) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return Status::FromErrno("-o " + path, errno);
  const bool wrote = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  const int write_errno = errno;
  const bool closed = std::fclose(f) == 0;
  if (!wrote) return Status::FromErrno("writing " + path, write_errno);
  if (!closed) return Status::FromErrno("closing " + path, errno);
  return Status::OK();
}

Status RunGet(const GetCommandOptions& o) {
  if (o.output.empty() && !o.meta) {
    return Status::InvalidArgument("give -o FILE (or -o - for stdout), --meta, or both");
  }
  if (o.output == "-" && o.meta) {
    return Status::InvalidArgument("-o - and --meta would both write to stdout; give -o FILE");
  }
  uint64_t id = 0;
  OPT4STORE_RETURN_IF_ERROR(ParseCount(o.id, &id).WithContext("ID"));

  std::unique_ptr<Store> store;
  OPT4STORE_RETURN_IF_ERROR(OpenExistingStore(o.path, &store));
  const uint64_t n = store->dataset_size();
  if (id >= n) {
    return Status::OutOfRange("sample " + o.id + " is out of range: the store's ids are 0.." +
                              std::to_string(n - 1) + " (dataset size " + std::to_string(n) + ")");
  }

  const uint64_t corrupt_before = store->Stats().disk_corrupt_records;
  StringSink sink;
  GetSource source = GetSource::kMiss;
  Status got = store->Get(kNoPosition, static_cast<ItemId>(id), &sink, &source);
  const uint64_t corrupt_after = store->Stats().disk_corrupt_records;
  OPT4STORE_RETURN_IF_ERROR(CloseStore(o.path, &store));

  if (got.IsCorruption() || (got.IsNotFound() && corrupt_after > corrupt_before)) {
    return Status::Corruption("sample " + std::to_string(id) +
                              " is corrupt on disk: its record failed its checks and was "
                              "dropped" +
                              (got.IsCorruption() ? " (" + got.message() + ")" : "") +
                              "; run 'opt4store verify " + o.path + "' to check the others");
  }
  if (got.IsNotFound()) {
    return Status::NotFound("sample " + std::to_string(id) + " is not in the store");
  }
  if (!got.ok()) return got.WithContext("reading sample " + std::to_string(id));

  if (!o.output.empty()) {
    if (o.output == "-") {
      OPT4STORE_RETURN_IF_ERROR(WriteStdout(sink.payload));
    } else {
      OPT4STORE_RETURN_IF_ERROR(WriteFile(o.output, sink.payload));
    }
  }
  if (o.meta) {
    OPT4STORE_RETURN_IF_ERROR(
        WriteStdout(MetaText(static_cast<ItemId>(id), source, sink.meta, sink.payload)));
  }
  return Status::OK();
}

}  // namespace

Command AddGetCommand(CLI::App* parent) {
  auto options = std::make_shared<GetCommandOptions>();
  CLI::App* app = parent->add_subcommand(
      "get",
      "Read one sample: write its payload bytes to a file, or print its value header.\n"
      "  opt4store get /data/cache 42 -o sample42.bin\n"
      "  opt4store get /data/cache 42 --meta");
  AddStoreArgument(app, &options->path);
  app->add_option("ID", options->id, "The sample's id")->required()->type_name("");
  app->add_option("-o,--output", options->output, "Write the payload here ('-': stdout)")
      ->type_name("FILE");
  app->add_flag("--meta", options->meta,
                "Print the value header (dtype, shape, tag, user) to stdout");
  return Command{app, [options] { return RunGet(*options); }};
}

}  // namespace opt4store
