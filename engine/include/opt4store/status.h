// Status: the outcome of a fallible call inside the engine and the tiers.
//
// An OK status holds a null pointer and costs nothing; an error holds a code
// and a message. Exceptions are used only at the edges (CLI, Python), which
// turn a Status into an exit code or an opt4store.Error.
//
// The class is [[nodiscard]]: ignoring a returned Status is a compiler warning.
// Dropping one on purpose is spelled PermitUncheckedError(), so that it can be
// searched for.
//
// Thread safety: a const Status may be read from several threads; a mutable
// one needs external synchronization, like std::string.
#ifndef OPT4STORE_STATUS_H_
#define OPT4STORE_STATUS_H_

#include <memory>
#include <string>
#include <string_view>

namespace opt4store {

class [[nodiscard]] Status {
 public:
  enum class Code : unsigned char {
    kOk = 0,
    kNotFound,         // a key, file or item that is not there
    kCorruption,       // bytes that fail a checksum or a format check
    kInvalidArgument,  // a caller's input is wrong (bad plan line, bad option)
    kIOError,          // the OS refused a read, write or sync
    kNoSpace,          // ENOSPC, or a budget (disk, /dev/shm) too small
    kBusy,             // another process holds the resource (the store lock)
    kOutOfRange,       // an index past the end (id >= dataset size, ...)
    kNotSupported,     // a feature this build or kernel lacks
    kStale,            // a store filled for another version of the data (fingerprint)
  };

  Status() noexcept = default;
  Status(const Status& other);
  Status& operator=(const Status& other);
  Status(Status&&) noexcept = default;
  Status& operator=(Status&&) noexcept = default;
  ~Status() = default;

  static Status OK() { return Status(); }
  static Status NotFound(std::string_view msg) { return Status(Code::kNotFound, msg); }
  static Status Corruption(std::string_view msg) { return Status(Code::kCorruption, msg); }
  static Status InvalidArgument(std::string_view msg) {
    return Status(Code::kInvalidArgument, msg);
  }
  static Status IOError(std::string_view msg) { return Status(Code::kIOError, msg); }
  // msg names the file or operation; errno_value adds strerror's text.
  static Status FromErrno(std::string_view msg, int errno_value);
  static Status NoSpace(std::string_view msg) { return Status(Code::kNoSpace, msg); }
  static Status Busy(std::string_view msg) { return Status(Code::kBusy, msg); }
  static Status OutOfRange(std::string_view msg) { return Status(Code::kOutOfRange, msg); }
  static Status NotSupported(std::string_view msg) { return Status(Code::kNotSupported, msg); }
  static Status Stale(std::string_view msg) { return Status(Code::kStale, msg); }

  bool ok() const { return state_ == nullptr; }
  Code code() const { return state_ ? state_->code : Code::kOk; }
  bool IsNotFound() const { return code() == Code::kNotFound; }
  bool IsCorruption() const { return code() == Code::kCorruption; }
  bool IsInvalidArgument() const { return code() == Code::kInvalidArgument; }
  bool IsIOError() const { return code() == Code::kIOError; }
  bool IsNoSpace() const { return code() == Code::kNoSpace; }
  bool IsBusy() const { return code() == Code::kBusy; }
  bool IsOutOfRange() const { return code() == Code::kOutOfRange; }
  bool IsNotSupported() const { return code() == Code::kNotSupported; }
  bool IsStale() const { return code() == Code::kStale; }

  // The message alone, without the code's name ("" when OK).
  const std::string& message() const;
  // "OK", or "<code name>: <message>".
  std::string ToString() const;

  // Returns a copy whose message is "<context>: <message>"; OK stays OK.
  Status WithContext(std::string_view context) const;

  // Marks a status as deliberately ignored.
  void PermitUncheckedError() const {}

 private:
  struct State {
    Code code;
    std::string message;
  };
  Status(Code code, std::string_view msg);

  std::unique_ptr<State> state_;
};

const char* CodeName(Status::Code code);

}  // namespace opt4store

// Returns from the enclosing function when expr yields a non-OK Status.
#define OPT4STORE_RETURN_IF_ERROR(expr)          \
  do {                                           \
    ::opt4store::Status _st = (expr);            \
    if (!_st.ok()) return _st;                   \
  } while (0)

#endif  // OPT4STORE_STATUS_H_
