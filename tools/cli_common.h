// Helpers shared by the opt4store subcommands: the Command record each
// subcommand registers, number and size parsing, the plan options (shared by
// every subcommand that takes a plan), aligned text tables and the one way
// --json output is printed.
//
// Parsers return Status with a message that quotes the offending text;
// callers add the option's name with WithContext("--capacity"). Nothing here
// throws: the one place that turns a Status into an exit code is main().
#ifndef OPT4STORE_TOOLS_CLI_COMMON_H_
#define OPT4STORE_TOOLS_CLI_COMMON_H_

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "opt4store/plan.h"
#include "opt4store/sizes.h"
#include "opt4store/status.h"

namespace CLI {
class App;
class Option;
}  // namespace CLI

namespace opt4store {

// A registered subcommand: its CLI11 node, and what main() runs when the
// user chose it. The closure owns the subcommand's parsed options.
struct Command {
  CLI::App* app = nullptr;
  std::function<Status()> run;
};

// ---- Numbers and sizes ----------------------------------------------------

// Comma-separated non-negative integers, e.g. "100,200,400".
Status ParseUintList(std::string_view text, std::vector<uint64_t>* values);
// A finite decimal number, e.g. "0.25".
Status ParseDouble(std::string_view text, double* value);
Status ParseDoubleList(std::string_view text, std::vector<double>* values);

// Sizes are ParseSize's and FormatSize's (opt4store/sizes.h), the grammar
// Python's parse_size reads too. A list is comma-separated, e.g.
// "1GiB,2GiB, 4GiB"; spaces around an item are ignored.
Status ParseSizeList(std::string_view text, std::vector<uint64_t>* values);
// "1 epoch", "3 epochs": count and noun, with an "s" unless count is 1.
std::string Plural(uint64_t count, const std::string& noun);
// "12.34%" for 0.1234.
std::string FormatPercent(double fraction);
// printf into a std::string.
std::string StringPrintf(const char* format, ...) __attribute__((format(printf, 1, 2)));

// A CLI11 check for options whose empty string would read as "not given"
// (`--dataset-size ''`): returns the error, or "" when value is not empty.
std::string RejectEmpty(const std::string& value);

// A text option in the help group `group`, its value shown as type_name
// ("--capacity N"); further settings chain on the Option returned.
CLI::Option* AddGroupedOption(CLI::App* app, const std::string& group, const std::string& flag,
                              std::string* value, const std::string& help,
                              const std::string& type_name);

// ---- Plan options -----------------------------------------------------------

// A plan given on the command line: either a file (--input/--plan FILE) or a
// generated one (--sampler KIND --dataset-size N ...). Values are kept as
// text so that every parse error names its option; "" means not given.
struct PlanOptions {
  std::string file_flag;  // "--input" or "--plan": how the file is named here
  std::string file;
  std::string sampler;
  std::string dataset_size;
  std::string epochs;
  std::string seed;
  std::string num_samples;
  std::string world_size;
  std::string rank;
  bool drop_last = false;
  std::string epoch_length;
};

// Registers the plan options on a subcommand, in a "Plan" group of its help.
// file_flag names the plan-file option ("--input" for plan, "--plan" for
// simulate and the store's commands). *options must outlive app's parsing.
void AddPlanOptions(CLI::App* app, const std::string& file_flag, PlanOptions* options);

// True if the user gave any plan option.
bool HasPlan(const PlanOptions& options);

// Checks the options (a generated plan's options with a file, rank >= world,
// ...) and fills *spec. OpenPlanSource() validates the rest.
Status BuildPlanSpec(const PlanOptions& options, PlanSpec* spec);

// ---- Output -----------------------------------------------------------------

// An aligned text table: the first column left-aligned, the others
// right-aligned, a rule under the header.
class TextTable {
 public:
  explicit TextTable(std::vector<std::string> header);
  void AddRow(std::vector<std::string> row);
  std::string Render() const;

 private:
  std::vector<std::vector<std::string>> rows_;  // rows_[0] is the header
};

// Writes text to stdout; an error if stdout is closed or full.
Status WriteStdout(std::string_view text);

// A --json result as one line of JSON and a newline. Commands build it as an
// nlohmann::ordered_json, so keys come out in the order they were set.
// Every double is rounded to 6 decimal places (the text output's precision),
// so the same command prints the same bytes; NaN and infinities become null;
// bytes of a string that are not UTF-8 (a file name can hold any) become
// U+FFFD instead of failing the command.
std::string JsonLine(nlohmann::ordered_json json);

}  // namespace opt4store

#endif  // OPT4STORE_TOOLS_CLI_COMMON_H_
