#pragma once
// Shared command-line handling for the subcommands (CLI11). Usage:
//   CLI::App app{"what it does", "optimus-cc NAME"};
//   ... add options ...
//   if (auto rc = occ::cli::parse_or_exit(app, argc, argv)) return *rc;
#include <CLI/CLI.hpp>

#include <cstdio>
#include <optional>
#include <string>

namespace occ::cli {

// Parses argv (argv[0] is the subcommand's name). Returns std::nullopt when the
// command should run, else the exit code to return: 0 after --help (help on
// stdout), 2 after a usage error, reported on stderr as one line
// "error: <CLI11's message>; run 'NAME --help' for the options".
inline std::optional<int> parse_or_exit(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
    return std::nullopt;
  } catch (const CLI::Success& e) {  // --help, --help-all, --version
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::string message = e.what();
    for (char& c : message)
      if (c == '\n' || c == '\r') c = ' ';
    while (!message.empty() && message.back() == ' ') message.pop_back();
    std::fprintf(stderr, "error: %s; run '%s --help' for the options\n", message.c_str(), app.get_name().c_str());
    return 2;
  }
}

}  // namespace occ::cli
