// opt4store: the admin CLI. This is the edge where a Status becomes an exit
// code: every error, whether from CLI11's parser or from the engine, is one
// line on stderr that starts with "opt4store: error: ".
#include <cstdio>
#include <exception>
#include <new>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "commands.h"
#include "opt4store/status.h"

namespace {

// Exit codes: 1 for a failed command, 2 for a command line that did not parse.
constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;

void PrintError(const std::string& message) {
  std::string line = message;
  // One line, whatever the message holds.
  for (char& c : line) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  std::fprintf(stderr, "opt4store: error: %s\n", line.c_str());
}

// "opt4store plan" when a subcommand was chosen, else "opt4store".
std::string CommandPath(const CLI::App& app) {
  std::string path = app.get_name();
  for (const CLI::App* current = &app; !current->get_subcommands().empty();) {
    current = current->get_subcommands().back();
    path += " " + current->get_name();
  }
  return path;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("opt4store: a cache store for deep-learning training samples that evicts "
               "with Belady's OPT, using the sampler's known order.",
               "opt4store");
  app.require_subcommand(1);
  app.footer("Run 'opt4store COMMAND --help' for a command's options.");

  std::vector<opt4store::Command> commands = {
      opt4store::AddPlanCommand(&app),
      opt4store::AddSimulateCommand(&app),
      opt4store::AddDemoCommand(&app),
      opt4store::AddCreateCommand(&app),
      opt4store::AddImportCommand(&app),
      opt4store::AddGetCommand(&app),
      opt4store::AddInspectCommand(&app),
      opt4store::AddVerifyCommand(&app),
      opt4store::AddRepairCommand(&app),
      opt4store::AddCompactCommand(&app),
      opt4store::AddClearCommand(&app),
      opt4store::AddStatsCommand(&app),
  };

  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {
    // --help: CLI11 prints the chosen subcommand's help.
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // CLI11 reports an unknown subcommand as a missing one; name it instead.
    if (app.get_subcommands().empty() && (argc == 1 || argv[1][0] != '-')) {
      std::string known;
      for (const opt4store::Command& command : commands) {
        known += (known.empty() ? "" : ", ") + command.app->get_name();
      }
      PrintError((argc == 1 ? std::string("no command given")
                            : "unknown command '" + std::string(argv[1]) + "'") +
                 " (expected one of: " + known + "; run 'opt4store --help' for usage)");
    } else {
      PrintError(std::string(e.what()) + " (run '" + CommandPath(app) + " --help' for usage)");
    }
    return kExitUsage;
  }

  try {
    for (const opt4store::Command& command : commands) {
      if (!command.app->parsed()) continue;
      opt4store::Status status = command.run();
      if (!status.ok()) {
        PrintError(status.message());
        return kExitFailure;
      }
      return 0;
    }
  } catch (const std::bad_alloc&) {
    PrintError("out of memory");
    return kExitFailure;
  } catch (const std::exception& e) {
    PrintError(e.what());
    return kExitFailure;
  }
  // require_subcommand(1) makes this unreachable.
  PrintError("no command given (run 'opt4store --help' for usage)");
  return kExitUsage;
}
